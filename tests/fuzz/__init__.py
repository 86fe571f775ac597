"""The long fuzz job: mutated specs and command lines thrown at every public entry point.

    python -m tests.fuzz.run --cases 200000            # the long run (ARCHSPEC_FUZZ_LONG=1 in CI terms)
    python -m tests.fuzz.run --cases 2000 --seed 7     # a quick look
    python -m tests.fuzz.run --replay SEED:INDEX       # one case again, with its traceback

Each case runs in a worker process that a watchdog restarts when a case hangs; the job counts
crashes (a traceback, exit code 3, an exception other than SpecError, UsageError and, for
wrong argument types, TypeError), hangs (a case over 2 s, confirmed by running it again
alone) and memory blow-ups (a case whose process peaks over 1 GB). tests/hostile/test_fuzz.py runs a
short sample of the same cases in the normal test run.

    seeds.py     the specs mutations start from (shipped, examples, bad specs, tiny ones)
    mutators.py  the spec mutators and the command-line generator, each named
    cases.py     one case from (seed, index): what to call and how its outcome is judged
    run.py       the worker, the watchdog and the counts
"""
