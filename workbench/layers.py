"""The layers of workbench, from the bottom: which package or module may import which.

Every package (``workbench/cluster/``), runtime sub-package (``workbench/runtime/state/``) and
top-level module (``workbench/config.py``) of workbench is in exactly one layer of :data:`LAYERS`, and imports only from the layers
*below* its own: never sideways within a layer, never up. Function-level imports count (a
lazy import still ties the importer to what it imports), and so does an import of a
package's ``__init__``. ``workbench`` itself (``workbench/__init__.py``, what ``import
workbench as wb`` gives) is the facade over the session, near the top; the shipped
algorithms are written on it as a user's cells are, so they are the top layer.

``tests/test_layers.py`` holds every import in ``workbench/`` to this table (and no module
imports another package's ``_private`` names); docs/architecture.md shows it. A new package
or module goes in the lowest layer above everything it imports. An import that would go up
means moving what it needs down (as ``rate_label`` went to ``workbench.config``), or the
lower layer offering a hook that the higher one sets (as ``workbench.context.lane_switch``).

Data only; it imports nothing.

    >>> [name for name, _members, _what in LAYERS][:3]
    ['model', 'errors and devices', 'options and arrays']
    >>> LAYERS[-1][1]
    ('workbench.algorithms',)
"""

__all__ = ["LAYERS"]

#: (the layer's name, its packages and top-level modules, what they hold), from the bottom
LAYERS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "model",
        ("workbench.fdg", "workbench.loaded_modules", "workbench.layers"),
        "fragments, syntax-tree analysis, graph, vocabulary, policies, plan, wiring: pure Python; "
        "which modules the process has finished importing; this table",
    ),
    (
        "errors and devices",
        ("workbench.errors", "workbench.devices"),
        "every exception workbench raises on purpose; device strings, and choosing a device in a thread",
    ),
    (
        "options and arrays",
        ("workbench.config", "workbench.metric_values", "workbench.kernels"),
        "RunConfig and the parsers generated from it; what `wb.log`'s values become; "
        "NumPy/CuPy/torch kernels (GAE, array-module choice, CUDA graphs)",
    ),
    (
        "metric reads and profiles",
        ("workbench.deferred_metrics", "workbench.profiling"),
        "device values `wb.log` reads at the end of the iteration; a run's profiles, HTML report, metric loggers",
    ),
    (
        "fragment API",
        ("workbench.context",),
        "what a cell asks of the runtime: `replica`, `wb.log`, `wb.allreduce`, `wb.env_steps`, `wb.step_elsewhere`",
    ),
    (
        "envs and evaluation",
        ("workbench.envs", "workbench.evaluation"),
        "vectorised envs: CartPole on NumPy/CuPy/torch, gymnasium, EnvPool; playing a trained state without "
        "learning, and its videos",
    ),
    (
        "processes and threads",
        ("workbench.runtime.process",),
        "teardown a second Ctrl-C does not cut short, exit guards, cells that end their process, malloc, "
        "a computing thread told from a stalled one",
    ),
    (
        "values",
        ("workbench.runtime.values",),
        "stacking, gathering and splitting values along interfaces; the all-reduce's arithmetic",
    ),
    (
        "transport",
        ("workbench.runtime.transport",),
        "mailboxes, channels and postmen, the wire (plain or TLS), torch.distributed process groups, "
        "what can be pickled",
    ),
    (
        "run state",
        ("workbench.runtime.state",),
        "the Run record, snapshots, checkpoints, portable state, resume checks, random streams, env steps",
    ),
    (
        "replicas",
        ("workbench.runtime.replicas",),
        "one replica: namespaces, program, loop, lanes, acting on arrival, the fence, its cells' errors",
    ),
    (
        "engine",
        ("workbench.runtime", "workbench.runtime.engine"),
        "the Backend contract, the driver and its pure bookkeeping, the inline backend, lost workers' lines; "
        "`workbench/runtime/__init__.py` is the engine's map and imports nothing",
    ),
    (
        "run store",
        ("workbench.run_store",),
        "finished runs kept on disk: the store, `wb.runs()`, `wb.load_run`, IQM and bootstrap CIs, `wb.compare`",
    ),
    (
        "on the runtime",
        (
            "workbench.cluster",
            "workbench.llm",
            "workbench.live_edits",
            "workbench.stretch_state",
            "workbench.progress",
            "workbench.auto_trials",
            "workbench.training_clips",
        ),
        "Dask: connect or the embedded LocalCluster, worker plugins, the Dask backend, the dashboard page "
        "(every Dask internal it touches is in `cluster/_dask_compat.py`); language models as fragments; "
        "what the trainer composes: live edits, a stretch's state, progress, auto's trials, clips while training",
    ),
    (
        "training",
        ("workbench.trainer", "workbench.widgets"),
        "the Trainer: stretches of plan, deploy, drive, collect; the placement board and the live view",
    ),
    ("session", ("workbench.session",), "`wb.FDG`: the graph, the namespace its cells read, `fdg.run`"),
    (
        "sweeps",
        ("workbench.sweep",),
        "settings × seeds as concurrent trials on one cluster: grid, median stopping, table",
    ),
    (
        "notebooks and magics",
        ("workbench.notebook", "workbench.magics"),
        "a notebook's FDG read without Jupyter; `%%fragment` and `%fdg`, thin over `wb.FDG` (the only IPython import)",
    ),
    (
        "entry points",
        ("workbench.cli", "workbench"),
        "`workbench run`, the headless runner; `import workbench as wb`, the public API",
    ),
    (
        "algorithms",
        ("workbench.algorithms",),
        "the shipped algorithms (PPO, DQN, A3C, MAPPO, GRPO, …), written on `wb` as a user's cells are",
    ),
)
