"""ninferkit's version, one place: the packaging reads it, results record it, the write-up prints it. A leaf,
so the run files (runs.py) and the write-up take it without importing the package's __init__ (which names
the steps above them)."""

__version__ = "0.1.0"
