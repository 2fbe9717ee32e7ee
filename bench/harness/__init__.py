"""What the experiments share: where and at which sizes they run, timers, shapes, contenders.

An experiment is a module ``bench/exp_<name>.py`` that measures and nothing else:

* ``NAME``: the data file stem, ``"rmsnorm"`` -> ``docs/data/<gpu>/rmsnorm.json``;
* ``run(args) -> {"config": ..., "results": ...}``: ``args.quick`` picks the smoke-test
  sizes (:func:`bench.harness.mode.gpu_or_quick`); ``config`` records every constant a
  report needs to read the results (contenders, tie rule, targets ...), because a report
  reads the JSON and never the experiment;
* optionally ``worker(argv) -> int``: the entry of the child processes it starts, through
  ``python -m bench.run_all --worker NAME ...`` (:func:`bench.harness.record.worker_args`).

``python -m bench.run_all`` runs experiments and saves each record through
:func:`bench.harness.record.save`; nothing else imports an experiment.

* mode.py: GPU or ``--quick``, the L2 size and rotating input sets;
* timers.py: CUDA-graph, eager and per-call timers, the copy bandwidth;
* shapes.py: the benchmark shapes (one training batch of Qwen3);
* contenders.py: the RMSNorm and fused add + RMSNorm contenders, built per width;
* op_timing.py: op-level input sets, bytes, timing of a contender, the copy-ceiling candidates;
* record.py: the environment block and saving a record.
"""
