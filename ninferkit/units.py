"""Byte units, binary as every engine prints them (MiB, GiB)."""

MIB = 1024**2
GIB = 1024**3
