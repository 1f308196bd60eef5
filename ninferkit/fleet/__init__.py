"""A lab of several boxes: one fleet file (params/fleets/*.yaml) runs each host's profile on that host, through
Slurm (`slurm.py`: one sbatch job array) or SSH (`ssh.py`), and `report/merge.py` joins their run directories.

`spec.py` reads and checks the fleet file (every host's profile through its own preflight, before anything
starts anywhere); `tasks.py` turns it into tasks (one per host x profile), the folder that records them, and the
task itself, which runs the runbook on its host and leaves a status file saying how it ended.
"""
