"""The sweep controller's parts (scripts/sweep): search spaces, schedulers, executors.

Python because the controller is orchestration (processes, Slurm commands, files) and plots
(matplotlib), not numerics; it drives the `loom` binary and reads what runs write
(metrics.jsonl, checkpoints), so it shares no code with the engine.
"""
