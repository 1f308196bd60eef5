"""An interrupted step's kernel dies too (Slurm's SIGTERM reaches every process of the job), and the cell's task
is left holding nbclient's DeadKernelError: asyncio printed its traceback when the task was collected, so an
interrupted fleet task's log ended in a traceback that read as a crash (issue 41, reproduced on a real Slurm job
by `scancel` mid-sweeps). Only that one is dropped; any other unretrieved task error still prints."""

from __future__ import annotations

import asyncio
import logging

import pytest
from nbclient.exceptions import DeadKernelError

from ninferkit.steps.runner import _quiet_dead_kernel


def test_only_the_dead_kernel_of_an_interrupt_is_left_unprinted(caplog: pytest.LogCaptureFixture) -> None:
    """What a collected task with an unretrieved exception does (asyncio's Task.__del__): the loop's exception
    handler, whose default logs to the `asyncio` logger with the traceback."""
    _quiet_dead_kernel()
    _quiet_dead_kernel()  # installed once, however many steps were interrupted
    assert sum(type(each).__name__ == "_DeadKernelAfterInterrupt" for each in logging.getLogger("asyncio").filters) == 1
    caplog.set_level(logging.ERROR, logger="asyncio")
    loop = asyncio.new_event_loop()
    try:
        for error in (DeadKernelError("Kernel died"), ValueError("a real problem")):
            loop.call_exception_handler({"message": "Task exception was never retrieved", "exception": error})
    finally:
        loop.close()
    assert "Task exception was never retrieved" in caplog.text and "ValueError: a real problem" in caplog.text
    assert "DeadKernelError" not in caplog.text and "Kernel died" not in caplog.text
