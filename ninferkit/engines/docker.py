"""`docker run` for an engine, as the field reports run it (seed 000 §3, seed 003 §一.3), where ninferkit
must differ on purpose.

Kept from the reports: `--gpus`, `--ipc=host` (the engine's CUDA and NCCL shared memory), the
profile's container settings (`serve.docker_env`, e.g. seed 000's NVIDIA variables), the model
folder mounted read-only at /models, the engine on its inner port (`serve.container_port`)
published on `serve.port`, and the engine's own flags unchanged.

Changed on purpose: the container runs in the foreground with `--rm` instead of `-d --restart
unless-stopped`, so the launch captures its log and `ninferkit stop` ends it; its name is
ninferkit's own, so a stop never touches a container the report's script started; the port is
published on `serve.host` (loopback unless the profile says otherwise) instead of every interface.
A key never appears on the command line: the container gets the variable's name (`-e NAME`), and
where the engine reads its key only from argv (NInfer), `sh -c 'exec … --api-key "$NAME"'` expands
it inside the container.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ninferkit.engines.launcher import Launcher
from ninferkit.errors import NinferkitError
from ninferkit.params.profile import Profile

MODELS = Path("/models")
_SECRET = "NINFERKIT_SECRET_PLACEHOLDER"


def container_name(profile: Profile) -> str:
    return f"ninferkit-{profile.name}-{profile.serve.port}"


def docker_argv(profile: Profile, adapter: Launcher, model_path: Path) -> list[str]:
    """The `docker run` argv of the engine, the model folder at /models.

    Inside the container the selected GPUs are numbered from 0, so the engine's own device options
    are renumbered (one GPU needs none: it is the engine's default device). The entrypoint is
    engine.binary as a path inside the image (or the adapter's default name, on the image's PATH);
    the adapter adds its own mounts (NInfer: the request log's folder).
    """
    image = profile.engine.docker_image
    if not image:
        raise NinferkitError("serve.docker is true but engine.docker_image is not set; name the image to run")
    serve = profile.serve
    devices = serve.gpu_devices
    # docker reads --gpus as CSV: a device list needs its own quotes (seed 003 quotes one device too)
    gpus = "all" if devices is None else '"device=' + ",".join(str(d) for d in devices) + '"'
    inside = serve.container_port or serve.port
    publish_host = "127.0.0.1" if serve.host in ("127.0.0.1", "localhost") else serve.host
    argv = ["docker", "run", "--rm", "--name", container_name(profile), "--gpus", gpus, "--ipc=host"]
    for name, value in serve.docker_env.items():
        argv += ["-e", f"{name}={value}"]
    secret = serve.api_key_env
    for name in dict.fromkeys([*([secret] if secret else []), *adapter.env(profile)]):
        argv += ["-e", name]  # by name: docker copies the value from its own environment
    argv += ["-p", f"{publish_host}:{serve.port}:{inside}", "-v", f"{model_path.parent.absolute()}:{MODELS}:ro"]
    mounts, inner = adapter.docker_mounts(profile)
    argv += mounts
    renumbered = None if devices is None or len(devices) == 1 else list(range(len(devices)))
    inner.update(host="0.0.0.0", port=inside, gpu_devices=renumbered)
    inner_profile = profile.model_copy(update={"serve": serve.model_copy(update=inner)})
    binary = profile.engine.binary or adapter.default_binary
    engine_argv = adapter.argv(inner_profile, MODELS / model_path.name, Path(binary))
    hidden = adapter.redact(engine_argv, mask=_SECRET)
    if secret is None or hidden == engine_argv:
        return argv + ["--entrypoint", engine_argv[0], image, *engine_argv[1:]]
    script = "exec " + shlex.join(hidden).replace(_SECRET, f'"${secret}"')
    return argv + ["--entrypoint", "sh", image, "-c", script]

