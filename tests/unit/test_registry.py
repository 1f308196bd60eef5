"""Registry.discover: a kind of thing is one module of its package, found without a list beside it."""

from __future__ import annotations

import pytest

from ninferkit.deploy import Mode
from ninferkit.errors import ProfileError
from ninferkit.registry import Registry


def test_discover_registers_each_module_that_has_the_attribute_once() -> None:
    modes = Registry[Mode]("deploy mode", ProfileError)
    modes.discover("ninferkit.deploy", "MODE")
    modes.discover("ninferkit.deploy", "MODE")  # a second ask finds nothing new and adds nothing twice
    assert modes.names() == ["docker", "systemd"]  # actions, service, power, from_run have no MODE
    assert modes.get("docker").name == "docker"
    with pytest.raises(ProfileError, match="deploy mode 'podman' is not registered; registered: docker, systemd"):
        modes.get("podman")
