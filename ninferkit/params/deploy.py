"""The `deploy` section: how `ninferkit deploy` leaves the profile's server running as a service.

The runbook's own launch measures a server and stops it; a deployment stays up across engine crashes and
reboots, as report 000's script leaves its box (a container started `-d --restart unless-stopped`, a
boot unit for the power limit). What differs between the two is here: the service's name (the report's
container is `ninfer`) and where its port is published (the report's `-p 18080:8080` is every interface;
ninferkit keeps loopback unless the profile says otherwise).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ninferkit.params.base import Section, shaped
from ninferkit.params.serve import host_name_or_address

DeployMode = Literal["docker", "systemd"]


class DeploySection(Section):
    mode: DeployMode | None = Field(None, description="docker (a container that restarts itself) or systemd (a "
                                    "unit for a native binary); null: docker when serve.docker is true")
    name: str | None = Field(None, **shaped(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$",
                                            "1-63 letters, digits, '_', '.' or '-', starting with a letter or digit"),
                             description="the container's or unit's name; null: ninferkit-<profile name>")
    publish_host: str | None = Field(None, description="the address the service listens on (Docker: the "
                                     "published port's); null: serve.host; 0.0.0.0 is every interface, as the "
                                     "reports")

    @field_validator("publish_host")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        return None if value is None else host_name_or_address(value)
