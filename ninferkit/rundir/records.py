"""The files steps hand each other, as typed records: one class per run file, each with its schema version.

A record names the fields the runbook reads and keeps every other field its file holds (extra="allow"),
so a run directory written by an older or newer ninferkit still loads and loses nothing: a field this
version does not name is read back as it was written. Fields default to what an older file lacked.
requests.jsonl's row is a record too (`RequestRow`), strict: a number field holding text is a damaged row.
Steps write their files as plain JSON (`ninferkit.rundir.runs`, atomic and scrubbed) and return the record of
what they wrote; `RunDir`'s readers return the same records.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class RunFile(BaseModel):
    """A JSON file of a run directory."""

    model_config = ConfigDict(extra="allow")

    SCHEMA_VERSION: ClassVar[int] = 1
    """The version this ninferkit writes."""

    schema_version: int | None = None
    """The version the file says it is; None in probe.json and server.json written before they carried one
    (version 1 all the same)."""
    profile_hash: str | None = None


class RecordedFinding(BaseModel):
    """One judgement of the machine against the profile, with the fix the field reports use."""

    model_config = ConfigDict(extra="allow")

    severity: str | None = None
    code: str | None = None
    message: str | None = None
    fix: str = ""
    waived: bool = False


class RecordPart(BaseModel):
    """A part of a JSON run file (a GPU in probe.json, a row of capacity.json's tables): lax like the file's
    record, the fields a reader uses named, the rest kept."""

    model_config = ConfigDict(extra="allow")

    def as_dict(self) -> dict[str, Any]:
        """The row as the file holds it (no default added), for a table."""
        return self.model_dump(exclude_unset=True)


class GpuInfo(RecordPart):
    """One GPU as NVML described it at setup (gpu.gpu_facts)."""

    index: int | None = None
    name: str | None = None
    arch: str | None = None
    """sm_XY."""
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    power_limit_w: int | float | None = None
    """The limit in force (NVML's enforced limit)."""
    power_limit_default_w: int | float | None = None
    """The card's default limit (seed 000 §0: "200 W（V100-PCIE 默认 250 W）"); None in probes made before ninferkit
    read it."""
    power_limit_min_w: int | float | None = None
    power_limit_max_w: int | float | None = None
    """The range `nvidia-smi -pl` accepts (000 §2.7: "可设 100–250"); None: not read."""
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pci_bus_id: str | None = None
    nvlink: list[dict[str, Any]] = []
    """NVML's links: {"link": n, "active": bool, "remote_bus_id", "remote_gpu"} per link it has (the far end's
    PCI address and NVML index, for an active link; probes before issue 25 have only link and active)."""


class GpuFacts(RecordPart):
    available: bool = False
    reason: str | None = None
    """Why there is no GPU, when there is none."""
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: list[GpuInfo] = []


class PciCard(RecordPart):
    """An NVIDIA display controller on the PCI bus (its `class` is kept as written), with its kernel driver."""

    address: str | None = None
    id: str | None = None
    driver: str | None = None


class KernelModule(RecordPart):
    loaded: bool | None = None
    flavour: str | None = None
    """open or proprietary."""
    version_line: str | None = None


class KernelLog(RecordPart):
    """The kernel log's NVIDIA lines (host/evidence.py: kernel_log); source None: unreadable, `reason` says why."""

    source: str | None = None
    reason: str | None = None
    lines: list[str] = []


class GpuTopology(RecordPart):
    """`nvidia-smi topo -m` (host/evidence.py: gpu_topology): its GPU matrix as printed and each pair's connection
    (`links["GPU0"]["GPU1"] == "NV4"`); source None: not read, `reason` says why."""

    source: str | None = None
    reason: str | None = None
    lines: list[str] = []
    links: dict[str, dict[str, str]] = {}


class DriverPackage(RecordPart):
    name: str | None = None
    version: str | None = None


class DriverPackages(RecordPart):
    """The NVIDIA packages the package manager holds (host/evidence.py: driver_packages)."""

    manager: str | None = None
    packages: list[DriverPackage] = []
    flavour: str | None = None
    """open, proprietary or both (from the driver packages); None: no driver package."""


class CudaToolkit(RecordPart):
    nvcc: str | None = None
    version: str | None = None


class DockerFacts(RecordPart):
    client: str | None = None
    engine_running: bool | None = None
    nvidia_runtime: bool | None = None


class CpuFacts(RecordPart):
    model: str | None = None
    cores: int | None = None
    avx2: bool | None = None
    avx512f: bool | None = None
    amx: list[str] | None = None
    """Intel AMX's flags; None in probes made before ninferkit read them."""


class DiskFacts(RecordPart):
    path: str | None = None
    """Where the artifact goes."""
    free_bytes: int | None = None
    total_bytes: int | None = None
    mount_point: str | None = None
    """The mount holding `path` (host/mounts.py); None: not read (a probe made before ninferkit read it)."""
    fstype: str | None = None
    mount_source: str | None = None
    network: bool | None = None
    """Whether the file system is a network one (NFS, CIFS, ...): seed 000 §1.4 loads in 18.2 s locally, 52-59 s
    over NFS."""


class HostFacts(RecordPart):
    """The machine itself (host/machine.py): memory, and VM or container; None: not read."""

    memory_total_bytes: int | None = None
    system_disk_total_bytes: int | None = None
    """The file system at `/` (seed 000 §0's "200G 系统盘"); None: not read (probes before ninferkit read it)."""
    system_disk_free_bytes: int | None = None
    vm: str | None = None
    """systemd-detect-virt --vm: the hypervisor's name, "none" on bare metal."""
    container: str | None = None
    hypervisor_flag: bool | None = None
    dmi: str | None = None
    source: str | None = None


class ProbeFacts(RecordPart):
    """What the machine is, by area (probe.collect)."""

    gpu: GpuFacts = Field(default_factory=GpuFacts)
    pci_gpus: list[PciCard] = []
    kernel_module: KernelModule = Field(default_factory=KernelModule)
    kernel_log: KernelLog = Field(default_factory=KernelLog)
    driver_packages: DriverPackages = Field(default_factory=DriverPackages)
    gpu_topology: GpuTopology = Field(default_factory=GpuTopology)
    cuda_toolkit: CudaToolkit = Field(default_factory=CudaToolkit)
    docker: DockerFacts = Field(default_factory=DockerFacts)
    cpu: CpuFacts = Field(default_factory=CpuFacts)
    disk: DiskFacts = Field(default_factory=DiskFacts)
    host: HostFacts = Field(default_factory=HostFacts)


class ProbeRecord(RunFile):
    """probe.json: what the machine is (facts by area: gpu, kernel_module, cpu, docker, disk...) and findings."""

    facts: ProbeFacts = Field(default_factory=ProbeFacts)
    findings: list[RecordedFinding] = []

    @property
    def gpus(self) -> list[GpuInfo]:
        return self.facts.gpu.gpus

    def blocking(self) -> list[RecordedFinding]:
        """The findings that stop the run: severity error, not waived by the profile."""
        return [f for f in self.findings if f.severity == "error" and not f.waived]


class ArtifactCheck(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str | None = None
    expected: Any = None
    actual: Any = None
    ok: bool = False


class ArtifactRecord(RunFile):
    """artifact.json: the model file (or checkpoint folder) as verified, where it came from, and the engine's
    pinned files. A step that could not get the file writes only source, path, ok and problems."""

    source: dict[str, Any] = {}
    path: str | None = None
    size_bytes: int | None = None
    sha256: str | None = None
    container_version: int | None = None
    container: dict[str, Any] | None = None
    parts: list[dict[str, Any]] | None = None
    """A multi-part container's continuation files, as read from the entry file."""
    files: list[dict[str, Any]] | None = None
    expected: dict[str, Any] = {}
    """The profile's pins the file was checked against (size, sha256, container version, a folder's files)."""
    engine: dict[str, Any] = {}
    """The engine the artifact is for, and the container versions its build accepts."""
    verification: dict[str, Any] = {}
    engine_tarball: dict[str, Any] | None = None
    binaries: list[dict[str, Any]] = []
    downloads: list[dict[str, Any]] = []
    checks: list[ArtifactCheck] = []
    warnings: list[str] = []
    ok: bool = False
    problems: list[str] = []


class AcceptanceCheck(BaseModel):
    """One of the launch step's checks of a fresh server (health, models, one chat request)."""

    model_config = ConfigDict(extra="allow")

    name: str | None = None
    ok: bool = False
    seconds: int | float | None = None
    detail: dict[str, Any] = {}


class ServerRecord(RunFile):
    """server.json: how the run's server was started, where it listens, what it printed at startup, and
    whether it passed its acceptance checks. The runner and `ninferkit stop` find the server from it."""

    state: str | None = None
    engine: str | None = None
    argv: list[str] = []
    pid: int | None = None
    pgid: int | None = None
    process: dict[str, Any] | None = None
    """Who the started process was beyond its reusable pid (server/process.py: process_identity): start_ticks,
    boot_id, exe, host; stop signals its group only while that still holds, and only on that host. None: it was
    gone when asked."""
    container: str | None = None
    """The Docker container's name, in Docker mode (stop runs `docker stop` on it)."""
    url: str | None = None
    log: str | None = None
    started: str | None = None
    ready_s: int | float | None = None
    model_id: str | None = None
    ledger: dict[str, Any] = {}
    checks: list[AcceptanceCheck] = []
    binary: str | None = None
    binary_sha256: str | None = None
    error: str | None = None
    stopped: str | None = None
    """When stop ended the server (or found its record stale)."""
    stop_note: str | None = None
    """Why stop signalled nothing: the record was stale (another program has its pid now)."""
    external: bool = False
    """ninferkit did not start this server (`--url`): there was no launch step, and no stop ever signals it."""
    engine_signs: dict[str, list[str]] = {}
    """An external server's answers that named its engine, per engine (`server/detect.py`); empty when none did."""
    engine_given: bool = False
    """The engine was named by `--engine`, not read from the server's answers."""
    engine_version: str | None = None
    """The build an external server reports of itself (llama-server's /props build_info), where it reports one."""
    served_pool: dict[str, Any] | None = None
    """The KV pool an external server reported when the run attached (`ApiDialect.served_pool`); None: not reported."""


class DeployRecord(RunFile):
    """deploy.json in a deployment's folder (`ninferkit deploy`): what was started as a service, from which
    settings, what was installed beside it, and whether it passed the acceptance checks."""

    mode: str | None = None
    name: str | None = None
    profile: str | None = None
    argv: list[str] = []
    files: list[str] = []
    url: str | None = None
    overrides: list[str] = []
    """The profile overrides it ran with: -p ones, then the capacity answer's (`--from-run`)."""
    from_run: str | None = None
    boot_unit: str | None = None
    """The power-limit unit's state after install, or why it was not installed."""
    actions: list[str] = []
    started: str | None = None
    ready_s: int | float | None = None
    checks: list[AcceptanceCheck] = []


Bounds = list[int | float | None]
"""[low, high]: what a printed figure pins (capacity.json's byte quantities and pools)."""


class CapacitySetting(RecordPart):
    """What a launch was started with (the capacity step's Setting)."""

    concurrency: int | None = None
    context_per_slot: int | None = None
    kv_dtype: str | None = None


class CapacityObservation(RecordPart):
    """One launch's log as the fit read it: its setting, whether it started and served, its memory ledger."""

    source: str | None = None
    kind: str | None = None
    setting: CapacitySetting = Field(default_factory=CapacitySetting)
    kv_tokens: int | None = None
    started: bool | None = None
    served: bool | None = None
    runtime_bytes: Bounds | None = None


class VariantCapacity(RecordPart):
    """The capacity a variant leaves (issue 39): its launch's startup books read as an observation at its own
    setting, and the largest KV pool the fit gives at that setting (the run's other launches pin the shared terms)."""

    name: str
    setting: CapacitySetting = Field(default_factory=CapacitySetting)
    kv_tokens: int | None = None
    """The pool its server started with."""
    served: bool | None = None
    runtime_bytes: Bounds | None = None
    """What its server took beyond the weights at startup, as its books say."""
    free_after_weights_bytes: Any = None
    """The free memory its largest pool was fitted against (the run's answer's: a budget where one stands in)."""
    max_kv_tokens: int | None = None
    max_kv_tokens_interval: list[int | None] | None = None
    max_kv_tokens_bounded_by: str | None = None
    source: str | None = None
    """Its log (variants/<name>/logs/server.log)."""
    note: str | None = None
    """Why a figure is missing (no log, no books in it)."""


class DecisionRow(RecordPart):
    """One cell of the decision table and one reading of it (the pool the server allocates at startup, or
    every slot at full length): whether it fits and by how much."""

    kv_dtype: str | None = None
    concurrency: int | None = None
    context_per_slot: int | None = None
    reading: str | None = None
    pool_tokens: int | None = None
    fits: bool | None = None
    """None: the printed rounding leaves it undecided."""
    margin_gib: Number = None
    margin_gib_interval: Bounds | None = None
    max_pool_tokens: Bounds | None = None
    verdict: str | None = None
    leftover_tokens: Bounds | None = None
    """[sure, possible] tokens the pool could still grow by (whole pages); set where it may fit."""
    leftover_gib: Bounds | None = None
    shortfall_gib: Bounds | None = None
    shortfall_tokens: Bounds | None = None
    """[sure, possible] tokens the pool would have to lose; set where it may not fit."""
    auto: dict[str, Any] | None = None
    """What `auto` would do at this cell (the "starts" row of an engine that has it)."""


class SearchStep(RecordPart):
    """One launch of a search (or an earlier launch it started from, `settled`)."""

    kv_tokens: int | None = None
    server_kv_tokens: int | None = None
    why: str | None = None
    started: bool | None = None
    served: bool | None = None
    fits: bool | None = None
    runtime_bytes: Bounds | None = None
    reused: bool | None = None
    settled: bool | None = None


class CapacitySearch(RecordPart):
    """The largest KV pool that started and served a request at one setting, and how it was found."""

    setting: CapacitySetting = Field(default_factory=CapacitySetting)
    mode: str | None = None
    answer_kv_tokens: int | None = None
    answer_context_per_slot: int | None = None
    server_kv_tokens: int | None = None
    verified_by_request: bool | None = None
    launches: int | None = None
    bounded_by: str | None = None
    """memory, or the engine's own rule; None in capacity.json files older than that field."""
    memory_allows_kv_tokens: Bounds | None = None
    """The pool memory alone would allow at this setting, from the fit."""
    shared_pool: bool | None = None
    """Whether the slots share one pool (its per-slot figure is then the setting's context); None in older files."""
    refused_kv_tokens: int | None = None
    """The smallest pool shown not to fit, and by what ("launch" or "fit"); None where no upper side was found and
    in capacity.json files older than these fields."""
    refused_by: str | None = None
    step_tokens: int | None = None
    """The search's unit (one page of a shared pool, one page a slot otherwise): refused - answer = step_tokens is
    an answer pinned to one page."""
    note: str | None = None
    results: list[SearchStep] = []


class CapacityAnswer(RecordPart):
    """What one basis says (the logs, the typed terms, or both where they agree): the figures at the profile's
    setting (free after weights, `auto`, largest pool, each lane's share, what-if rows) and the decision table."""

    basis: str | None = None
    source: str | None = None
    weights_bytes: Bounds | None = None
    free_after_weights_bytes: Bounds | None = None
    bytes_per_token: Bounds | None = None
    fixed_bytes: Bounds | None = None
    auto: dict[str, Any] | None = None
    memory_kv_tokens_interval: Bounds | None = None
    max_kv_tokens_interval: Bounds | None = None
    engine_max_kv_tokens: int | None = None
    per_slot_tokens: Bounds | None = None
    """Each lane's share of the largest pool the engine takes (within its cap, max_context x slots)."""
    memory_per_slot_tokens: Bounds | None = None
    """Each lane's share of the largest pool memory allows, whatever the engine's cap (seed 000 §2.5's "per lane")."""
    what_if: list[dict[str, Any]] = []
    decision_table: list[DecisionRow] = []
    missing: str | None = None
    """What would fill this answer in, where it has no formula or no free memory."""


class CapacityRecord(RunFile):
    """capacity.json: the memory formula fitted to the launches' own logs, the decision table and searches.
    Byte quantities are a number or a [low, high] interval (printed figures pin a value only so finely)."""

    created: str | None = None
    engine: str | None = None
    python: str | None = None
    platform: str | None = None
    setting: dict[str, Any] = {}
    formula: str | None = None
    page_tokens: int | None = None
    auto_headroom_bytes: Any = None
    bytes_per_token: Any = None
    bytes_per_token_source: str | None = None
    bytes_per_token_by_dtype: dict[str, Any] = {}
    payload_bytes_per_token_by_dtype: dict[str, Any] = {}
    architecture: Any = None
    fixed_bytes: Any = None
    fixed_bytes_at: dict[str, Any] | None = None
    free_after_weights_bytes: Any = None
    free_after_weights_source: str | None = None
    first_use_bytes: Any = None
    max_kv_tokens: int | None = None
    max_kv_tokens_interval: list[int | None] | None = None
    max_kv_tokens_bounded_by: str | None = None
    max_kv_tokens_note: str | None = None
    known_terms: dict[str, Any] | None = None
    """capacity.known as typed (figures with their units), where the profile has any."""
    answers: list[CapacityAnswer] = []
    """One per basis: one where the typed terms and the logs agree, both where they conflict (logs first)."""
    observations: list[CapacityObservation] = []
    decision_table: list[DecisionRow] = []
    searches: list[CapacitySearch] = []
    search_launches: int | None = None
    terms_pinned: list[str] = []
    terms_unpinned: list[str] = []
    conflicts: list[str] = []
    notes: list[str] = []
    narrowed_by_launches: list[str] | None = None
    """How the run's launches narrowed the largest pools (capacity/evidence.py); None where none did."""
    variants: list[VariantCapacity] = []
    """The capacity each of the profile's variants leaves, from its own launch (none: no variant launched)."""
    serving_id: str | None = None
    """The serving the answer is for: the launch step's (rundir/identity.py); None in files older than that."""


class VariantRecord(RunFile):
    """variants/<name>/variant.json: one variant's launch (issue 39): what it set, the serving its rows name,
    how long its server took to start and the whole variant took, and how it ended. Its server's own files
    (server.json with the startup ledger, logs/server.log) lie beside it: variants/<name>/ is a run folder."""

    name: str | None = None
    set: dict[str, Any] = {}
    why: str = ""
    serving_id: str | None = None
    state: str | None = None
    """running | done | failed (the server did not start, or died: `error` says why)."""
    launched: str | None = None
    ready_s: int | float | None = None
    seconds: int | float | None = None
    """From the launch to the stop: what the variant cost in wall time."""
    cells_sent: int | None = None
    error: str | None = None


class FleetTaskRecord(RunFile):
    """fleet-task.json: the fleet task that made this run (ninferkit/fleet/): the host it names, which every
    merged row carries (the machine's own hostname is the manifest's), the GRES it asked for, the fleet, and
    where its attempts ran (nodes, Slurm job ids), which merged rows carry too."""

    fleet: str | None = None
    host: str | None = None
    task: int | None = None
    via: str | None = None
    gres: str | None = None
    nodes: list[str] = []
    """Where its attempts ran, in order: the Slurm node (SLURMD_NODENAME) or the host's own name."""
    jobs: list[str] = []
    """Its attempts' Slurm job ids, `<array>_<task>` (none over SSH): a resumed run was made by several."""


class ImportedRecord(RunFile):
    """imported.json: a run directory `ninferkit import` made from a peer tool's file (interop/): the tool, its
    version, the file and its sha256, and the tool's own aggregates, each kept as the statistic it is (mean,
    p99...) with the tool's name and unit, never spread into per-request rows."""

    tool: str | None = None
    version: str | None = None
    source: str | None = None
    """The file or folder given to `ninferkit import`."""
    files: dict[str, str] = {}
    """Each file the import read (its name) -> its sha256."""
    per_request: bool = False
    """Whether requests.jsonl holds the tool's own per-request records (False: aggregates only)."""
    aggregates: list[dict[str, Any]] = []
    notes: list[str] = []


class BenchComparison(BaseModel):
    """One prompt length of llama_bench.json: the server's context-sweep medians beside llama-bench's."""

    model_config = ConfigDict(extra="allow")

    prompt_tokens: int | None = None
    prefill_tok_s_server: Number = None
    prefill_tok_s_llama_bench: Number = None
    prefill_ratio: Number = None
    decode_tok_s_server: Number = None
    decode_tok_s_llama_bench: Number = None
    decode_ratio: Number = None


class LlamaBenchRecord(RunFile):
    """llama_bench.json: benchmarks/bench_llama_bench.py's run of llama-bench on the run's build and model, at the
    context sweep's prompt lengths, and its comparison with the server (optional: that benchmark runs by hand)."""

    created: str | None = None
    binary: str | None = None
    model: str | None = None
    repetitions: int | None = None
    comparison: list[BenchComparison] = []
    llama_bench_prefill: list[dict[str, Any]] = []
    """llama-bench's own JSON lines (its field names)."""
    llama_bench_decode: list[dict[str, Any]] = []


class StepEntry(BaseModel):
    """A step's line in the manifest: its status as the runner (or a step) recorded it."""

    model_config = ConfigDict(extra="allow")

    status: str | None = None
    seconds: int | float | None = None
    error: str | None = None


class ProfileChange(RecordPart):
    """A step that changed the run's profile (a notebook told `allow_profile_change=True`): what each field was
    and became."""

    step: str
    at: str
    changed: dict[str, list[Any]]
    """Key path -> [the run's value, the new value]; a field one side lacks is null there."""


class GitState(RecordPart):
    """The ninferkit checkout a run was made with (version.git_state)."""

    commit: str | None = None
    dirty: bool | None = None
    """Uncommitted changes to the code (the ninferkit package folder), not to docs or examples; runs made before
    session 38 recorded any change in the checkout."""


class RunbookStep(RecordPart):
    """A step of the runbook the run was made with, as that ninferkit declared it (ninferkit.steps.catalog)."""

    name: str
    label: str
    """How the write-up names it: 'setup (00_setup)'."""


def _runbook_before_recorded() -> list[RunbookStep]:
    """The runbook of a manifest written before manifests recorded theirs: the steps of that time, in order, so
    an older run's write-up keeps its step order and labels. Fixed: a run made since records its own."""
    return [RunbookStep(name=name, label=label) for name, label in (
        ("setup", "setup (00_setup)"), ("verify", "verify (01_artifact_verify)"), ("attach", "attach"),
        ("launch", "launch (02_launch)"), ("sweeps", "sweeps (03_sweeps)"), ("capacity", "capacity (04_capacity_fit)"),
        ("writeup", "writeup (05_writeup)"))]


class Manifest(RunFile):
    """manifest.json: the profile the run was made with (and its hash), packages, host, each step's status."""

    run_id: str | None = None
    created: str | None = None
    profile_name: str | None = None
    profile_source: str | None = None
    profile_overrides: list[str] = []
    profile: dict[str, Any] = {}
    profile_comments: dict[str, str] | None = None
    """The comment written beside each profile value (key path -> text); None in manifests older than that."""
    profile_history: list[dict[str, Any]] = []
    """The profile hashes this run replaced, each with the serving id its rows had (`serving_id`, where known)."""
    servings: dict[str, dict[str, Any]] = {}
    """Every serving identity a row or ledger line of this run names: id -> its fields (rundir/identity.py)."""
    profile_changes: list[ProfileChange] = []
    """Which step changed which profile fields, in order (see ninferkit.rundir.profile_change)."""
    packages: dict[str, str | None] = {}
    python: str | None = None
    platform: str | None = None
    host: str | None = None
    """The machine's hostname."""
    git: GitState = Field(default_factory=GitState)
    steps: dict[str, StepEntry] = {}
    planned_steps: list[str] | None = None
    """The steps `ninferkit run` chose (the setup step checks those); None for notebooks run by hand."""
    runbook: list[RunbookStep] = Field(default_factory=_runbook_before_recorded)
    """Every step of the runbook in order, with its label, as the notebooks recorded it (notebook_run): the
    write-up's step order and names, so the write-up needs no list of its own."""


Number = int | float | None
"""A time, a rate or a temperature as the file holds it: an int stays an int, so a row reads back as it was
written."""


class RunRow(RunFile):
    """A line of a JSONL run file (requests.jsonl, telemetry.jsonl, sweeps/cells.jsonl).

    Strict: a number field holding text or a bool is a damaged line, refused where it is read (naming the
    file, line and field, `ninferkit.rundir.runs.read_rows`), not deep in a table. Fields the record does not name
    are kept (an engine's extras, a newer ninferkit's), so a line reads back as it was written.
    """

    model_config = ConfigDict(extra="allow", strict=True)

    def as_dict(self) -> dict[str, Any]:
        """The line as a plain dict, with the fields it holds and no default added: what pandas frames and
        the engine adapters take, equal to the line it was read from."""
        held = self.model_fields_set
        return {name: value for name, value in self.__dict__.items() if name in held} | (self.model_extra or {})

    @classmethod
    def expected(cls, name: str) -> str:
        """What a field holds, in words ("a number"), for the error that names a damaged line's field."""
        annotation: Any = cls.model_fields[name].annotation if name in cls.model_fields else None
        if annotation in (Number, int | None, int | float):
            return "a number"
        return _WORDS.get(annotation, "a text")


_WORDS: dict[Any, str] = {bool | None: "true or false", dict[str, Any] | None: "a JSON object",
                          list[int | float] | None: "a list of numbers", list[str] | None: "a list of text"}


_LOG_ONLY: dict[str, Any] = {"request_log_only": True}


def _request_log_only() -> Any:
    """A server field only NInfer's request log carries (engines/ninfer/request_log.py), not every engine's
    per-request timings: the client does not write it, the join with the log does."""
    return Field(None, json_schema_extra=_LOG_ONLY)


class RequestRow(RunRow):
    """A line of requests.jsonl: one request as the sweep recorded it.

    The run's fields (what makes a result reproducible), the sweep's (which cell, attempt and repetition),
    the client's (ninferkit.measure.client.RequestResult: monotonic times, usage, derived latencies) and the
    server's own per-request timings (the fields ending in `_server`; None where the engine reports none).
    server_truth.jsonl lays the engine's own record over a row (sweeps/truth.py) with the `server_*` ids.
    Engine extras are kept. Strict (RunRow): a count is an int, a time an int or a float, never text or a bool.
    """

    run_id: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    artifact_sha256: str | None = None
    serving_id: str | None = None
    """The serving identity it was measured under (rundir/identity.py); None in older rows."""

    sweep: str | None = None
    cell_id: str | None = None
    cell: dict[str, Any] | None = None
    """The cell's parameters, as planned."""
    attempt: str | None = None
    """Which attempt at the cell: the ledger (sweep_cells.jsonl) names the one its table counts."""
    request_uid: str | None = None
    """This row's id; server_truth.jsonl entries name their row by it."""
    repetition: int | None = None
    """The cell's repetition index; warm-up requests count up to -1."""
    warmup: bool | None = None
    prefix_role: str | None = None
    """prefix_reuse cells: "seed" (fills the cache, not reported) or "measured"."""
    seeded_by: str | None = None
    seed_prompt_tokens: int | None = None
    prompt_content_tokens: int | None = None
    """Prompt tokens of the content alone, without the chat template's."""
    client_index: int | None = None
    """concurrency cells: which of the concurrent clients sent it."""
    scheduled_s: Number = None
    """rate cells: when the open loop planned the send, seconds after the cell's start."""
    schedule_lag_s: Number = None
    """rate cells: how late the send was against its schedule (the client's own delay)."""
    session_index: int | None = None
    """sessions cells: which of the concurrent sessions sent it."""
    turn: int | None = None
    """sessions cells: the turn of its session, from 1; the prompt holds every earlier turn and reply."""
    think_s: Number = None
    """sessions cells: the think time waited after the previous turn's reply, before this turn was sent."""
    history_sent: str | None = None
    """sessions cells: how the earlier turns reached the server: "full" (resent), "cache_control" (resent
    behind a Messages breakpoint) or "previous_response_id" (named, not resent)."""
    agent_step: int | None = None
    """agent cells: the round trip of its session, from 1."""
    tool_calls: int | None = None
    """agent cells: the tool calls the reply made."""
    tool_calls_unparsed: int | None = None
    """agent cells: of those, the calls the loop could not run (arguments not a JSON object, an unknown tool)."""
    tool_s: Number = None
    """agent cells: seconds spent running the reply's tool calls."""
    agent_end: str | None = None
    """agent cells, on a session's last round trip: "answer" (a reply without tool calls) or "limit"."""
    trace_index: int | None = None
    """trace cells: the request's line among the trace's requests, from 0 (its schedule is `scheduled_s`)."""

    api: str | None = None
    status: str = "incomplete"
    """ok, errored or incomplete."""
    error: str | None = None
    http_status: int | None = None
    started_utc: str | None = None
    retried: str | None = None
    """The error of a first try that got no response byte, when the request was sent again."""
    t_send: Number = None
    """Monotonic seconds, telemetry.jsonl's clock, as are the other t_ fields."""
    t_first_byte: Number = None
    t_first_token: Number = None
    t_first_answer_token: Number = None
    """The first event carrying answer text or a tool call, not reasoning (ninferkit.measure.client)."""
    t_last_token: Number = None
    t_done: Number = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    """Prompt tokens served from the prefix cache, as the response's `usage` says; None where usage has no count
    (NInfer G1's chat usage never has one: see cached_tokens_server)."""
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    reasoning_events: int | None = None
    """Events that carried reasoning text (reasoning_content, thinking blocks); 0: the stream had none."""
    finish_reason: str | None = None
    response_id: str | None = None
    temperature: Number = None
    seed: int | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    ttft_client_s: Number = None
    ttft_answer_client_s: Number = None
    """Time to the first answer token: after the reasoning, where the engine streams it apart."""
    e2e_client_s: Number = None
    decode_tok_s_client: Number = None
    tpot_client_s: Number = None
    text_events: int | None = None
    """How many events carried generated text."""
    itl_client_s: list[int | float] | None = None
    """The gaps between those events (vLLM's ITL)."""

    prompt_tokens_server: int | None = None
    cached_tokens_server: int | None = None
    """Prompt tokens served from the prefix cache by the engine's own record (NInfer's request log
    `prefix_cache_hit_tokens` or `done` line `cache=`, vLLM's counters, llama.cpp's `cache_n`), kept apart from
    the client's usage count; None where the engine recorded nothing for this request: unknown, never 0."""
    prompt_s_server: Number = None
    prefill_tok_s_server: Number = None
    decode_tokens_server: int | None = None
    decode_s_server: Number = None
    decode_tok_s_server: Number = None
    queue_s_server: Number = None
    drafted_tokens_server: int | None = None
    accepted_tokens_server: int | None = None
    acceptance_server: Number = None
    """accepted / drafted tokens of speculative decoding."""
    ttft_s_server: Number = _request_log_only()
    e2e_s_server: Number = _request_log_only()
    completion_tokens_server: int | None = _request_log_only()
    reasoning_tokens_server: int | None = _request_log_only()
    spec_rounds_server: int | None = _request_log_only()

    client_lag_max_s: Number = None
    """How late the client's event loop ran at most while this request was out (measure/client_clock): its stamps
    are late by as much; None where no probe fell inside the request (unknown, not zero)."""
    client_unsure: str | None = None
    """Why the client cannot vouch for this row's timing (its loop lag against its inter-token gap), or None."""
    client_worker: int | None = None
    """The client worker process that stamped this request (measure/client_workers), or None: the sweep's own."""

    server_join: str | None = None
    """How server_truth.jsonl's entry was paired with the row, or None."""
    server_note: str | None = None
    """Why there is no pair, when there is none; or, starting "withheld", why the pair's server numbers are not
    published (they contradict the client's timings: sweeps/truth.py timing_conflict)."""
    server_request_id: int | str | None = None
    """The engine's id of the request (NInfer's is a number)."""
    server_instance_id: str | None = None
    decode_gap_note: str | None = None
    """Where the client's decode rate and the engine's differ by more than the run's spread: both rates and the
    reason the rows and the engine's throughput lines show (sweeps/truth.py decode_gaps); None where they agree."""

    LOG_FIELDS: ClassVar[tuple[str, ...]]
    """Every server field, in order: what a join with NInfer's request log fills in."""
    SERVER_FIELDS: ClassVar[tuple[str, ...]]
    """The server fields every engine's per-request timings may fill (the client spreads them out by name)."""


IMPOSSIBLE_TOK_S = 10_000_000.0
"""A per-request rate above this is not a measurement (a whole H200 node prefills about 10^5 tok/s)."""
IMPOSSIBLE_TOKENS = 100_000_000
"""A token count above this is beyond every model's context."""


def request_row_refusals(row: dict[str, Any]) -> dict[str, str]:
    """What `RequestRow` refuses in a row ninferkit is about to write (field -> why, naming the value), so the
    client stores only rows its own reader reads: a field of the wrong type (a finish_reason that is an
    object, an id that is a number, a rate that is text), and values no request can have (a negative time or
    count, a count beyond any context, a rate beyond any hardware, an acceptance outside 0..1)."""
    refused: dict[str, str] = {}
    try:
        RequestRow.model_validate(row)
    except ValidationError as error:
        for problem in error.errors():
            name = str(problem["loc"][0])
            refused.setdefault(name, f"is {_shown(row.get(name))}, not {RequestRow.expected(name)}")
    for name, value in row.items():
        if name in refused or name not in RequestRow.model_fields:
            continue
        values = value if isinstance(value, list) else [value]
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        why = _impossible(name, numbers)
        if why:
            refused[name] = f"is {_shown(value)}, {why}"
    return refused


def _impossible(name: str, numbers: list[int | float]) -> str | None:
    measured = (name.endswith(("_tokens", "_tokens_server", "_s", "_s_server", "_tok_s", "_tok_s_client",
                               "_tok_s_server")) or name == "itl_client_s") and not name.startswith("schedule")
    if not measured or not numbers:
        return None
    if any(v != v or v in (float("inf"), float("-inf")) for v in numbers):
        return "not a finite number"
    if any(v < 0 for v in numbers):
        return "below 0: no time, count or rate is negative"
    if "tok_s" in name and max(numbers) > IMPOSSIBLE_TOK_S:
        return f"above {IMPOSSIBLE_TOK_S:,.0f} tok/s: beyond any hardware"
    if "tokens" in name and max(numbers) > IMPOSSIBLE_TOKENS:
        return f"above {IMPOSSIBLE_TOKENS:,} tokens: beyond any model's context"
    return None


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:60] + "..."


RequestRow.LOG_FIELDS = tuple(name for name in RequestRow.model_fields if name.endswith("_server"))
RequestRow.SERVER_FIELDS = tuple(name for name in RequestRow.LOG_FIELDS
                                 if RequestRow.model_fields[name].json_schema_extra != _LOG_ONLY)


class TelemetrySample(RunRow):
    """A line of telemetry.jsonl: one sample on the requests' monotonic clock (`t_mono`), of one `source`:
    `nvml` (one GPU's power, clocks and throttling, ninferkit/measure/telemetry.py), `engine_log` (one periodic
    throughput line of the engine, its numbers named by the adapter's parse_throughput: the named ones
    below, and whatever else that engine prints, kept as extra fields) or `metrics` (the engine's /metrics series that
    changed since the previous `metrics` row, in `values`; the first row holds them all)."""

    t_mono: int | float
    t_utc: str | None = None
    source: str

    gpu: int | None = None
    power_w: Number = None
    sm_clock_mhz: Number = None
    mem_clock_mhz: Number = None
    temperature_c: Number = None
    util_gpu_pct: Number = None
    util_mem_pct: Number = None
    memory_used_bytes: int | None = None
    throttle_reasons: list[str] | None = None
    throttled: bool | None = None

    interval_s: Number = None
    """engine_log: the window the line's rates are over."""
    decode_tok_s: Number = None
    prefill_tok_s: Number = None
    decode_tokens: Number = None
    """engine_log: tokens the line counts in its window, where it prints them (else rate x interval)."""
    prefill_tokens: Number = None

    values: dict[str, Any] | None = None
    """metrics: the scraped values by metric name."""


class CellEntry(RunRow):
    """A line of sweeps/cells.jsonl: one finished attempt at a sweep cell (the sweeps step appends one per
    cell it ran). A cell's last entry for the run's profile hash is its outcome, and names the attempt whose
    rows the tables count; a rerun after a failure or a changed profile appends a new attempt."""

    cell_id: str
    sweep: str
    cell: dict[str, Any] = {}
    """The cell's parameters, as planned."""
    status: str
    """done, failed or skipped."""
    attempt: str
    reason: str | None = None
    diagnosis: dict[str, Any] | None = None
    """The engine adapter's diagnosis of the failure (code, message, fix), where the log gave one."""
    notes: list[str] = []
    """What the plan sent differently from what was asked."""
    request_fields: dict[str, Any] | None = None
    serving_id: str | None = None
    """The serving identity the attempt was measured under (rundir/identity.py); None in older ledgers."""
    finished_utc: str | None = None
    requests_sent: int | None = None
    requests_ok: int | None = None
    requests_errored: int | None = None
    requests_incomplete: int | None = None
    client_lag_p99_s: Number = None
    """The client's event-loop lag over the cell (measure/client_clock), p99 and largest, in seconds."""
    client_lag_max_s: Number = None
    client_cpu_share: Number = None
    """The client process's CPU time over the cell's wall time (1: one core saturated); with workers, the busiest's."""
    client_workers: int | None = None
    """How many client worker processes stamped the cell's streams (measure/client_workers); None: the sweep's own
    process did."""
    client_unsure: str | None = None
    """Why the client cannot vouch for the cell's timing, or None (older runs: not measured)."""
    client_spread: str | None = None
    """How many client processes stamped the cell's streams and why (measure/client_workers.spread), where the
    kind weighed its load; None: it did not (one process)."""
