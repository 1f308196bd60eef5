"""Sweeps: the measurements of 03_sweeps, one cell at a time, with the server's own accounting beside the client's.

    plan       the cells of the profile's sweep kinds (kinds/, one module each), written as plan.json
    execute    one cell's requests against the server, its rows in requests.jsonl
    tables     the saved tables (tables/*.csv) from the rows and the server's log truth (truth.py)
    spec_off   the second server the speculation A/B's cells run against

The step that runs them in order, resumable, is ninferkit/steps/sweeps.py.
"""
