"""`docker run` for an engine, as the field reports run it (seed 000 §3, seed 003 §一.3), where ninferkit
must differ on purpose.

Kept from the reports: `--gpus`, `--ipc=host` (the engine's CUDA and NCCL shared memory), the
profile's container settings (`serve.docker_env`, e.g. seed 000's NVIDIA variables), the model
folder mounted read-only at /models, the engine on its inner port (`serve.container_port`)
published on `serve.port`, and the engine's own flags unchanged.

A deployment (`ninferkit deploy`, `service_argv`) is the report's own form: `-d --restart unless-stopped`,
the profile's deploy.name, the program as the image's command. For the runbook's measuring launch
(`docker_argv`), changed on purpose: the container runs in the foreground with `--rm` instead of `-d --restart
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
    serve = profile.serve
    publish_host = "127.0.0.1" if serve.host in ("127.0.0.1", "localhost") else serve.host
    options, image, engine_argv, script = _container(profile, adapter, model_path, publish_host)
    argv = ["docker", "run", "--rm", "--name", container_name(profile), *options]
    if script is None:
        return argv + ["--entrypoint", engine_argv[0], image, *engine_argv[1:]]
    return argv + ["--entrypoint", "sh", image, "-c", script]


def service_argv(profile: Profile, adapter: Launcher, model_path: Path, name: str, publish_host: str) -> list[str]:
    """The `docker run -d --restart unless-stopped` argv of a deployment (seed 000 §3), named `name`, its port
    published on `publish_host` (0.0.0.0: every interface, written `-p PORT:INNER` as the report writes it).

    The program is the image's command, as the report runs it (`IMAGE ninfer-serve MODEL FLAGS` against its
    CMD image; `IMAGE MODEL FLAGS` where engine.image.entrypoint says the image's ENTRYPOINT is the engine),
    so the report's run.sh and this command run the same container."""
    options, image, engine_argv, script = _container(profile, adapter, model_path, publish_host)
    argv = ["docker", "run", "-d", "--name", name, "--restart", "unless-stopped", *options]
    has_entrypoint = profile.engine.image.entrypoint
    if script is None:
        return argv + [image, *(engine_argv[1:] if has_entrypoint else engine_argv)]
    return argv + (["--entrypoint", "sh", image, "-c", script] if has_entrypoint else [image, "sh", "-c", script])


def _container(profile: Profile, adapter: Launcher, model_path: Path,
               publish_host: str) -> tuple[list[str], str, list[str], str | None]:
    """(`docker run` options from --gpus to the mounts, image, the engine's argv inside the container, the
    `sh -c` script that expands the key inside it, or None where no key is on the engine's command line)."""
    image = profile.engine.docker_image
    if not image:
        raise NinferkitError("serve.docker is true but engine.docker_image is not set; name the image to run")
    serve = profile.serve
    devices = serve.gpu_devices
    # docker reads --gpus as CSV: a device list needs its own quotes (seed 003 quotes one device too)
    gpus = "all" if devices is None else '"device=' + ",".join(str(d) for d in devices) + '"'
    inside = serve.container_port or serve.port
    options = [*(["--gpus", gpus] if adapter.uses_gpu(profile) else []), "--ipc=host"]
    for name, value in serve.docker_env.items():
        options += ["-e", f"{name}={value}"]
    secret = serve.api_key_env
    for name in dict.fromkeys([*([secret] if secret else []), *adapter.env(profile)]):
        options += ["-e", name]  # by name: docker copies the value from its own environment
    published = f"{serve.port}:{inside}" if publish_host == "0.0.0.0" else f"{publish_host}:{serve.port}:{inside}"
    options += ["-p", published, "-v", f"{model_path.parent.absolute()}:{MODELS}:ro"]
    mounts, inner = adapter.docker_mounts(profile)
    options += mounts
    renumbered = None if devices is None or len(devices) == 1 else list(range(len(devices)))
    inner.update(host="0.0.0.0", port=inside, gpu_devices=renumbered)
    inner_profile = profile.model_copy(update={"serve": serve.model_copy(update=inner)})
    binary = profile.engine.binary or adapter.default_binary
    engine_argv = adapter.argv(inner_profile, model_path.absolute(), Path(binary), served_as=MODELS / model_path.name)
    hidden = adapter.redact(engine_argv, mask=_SECRET)
    if secret is None or hidden == engine_argv:
        return options, image, engine_argv, None
    return options, image, engine_argv, "exec " + shlex.join(hidden).replace(_SECRET, f'"${secret}"')
