"""A module another thread is still importing counts as not imported (`loaded`), so a
replica's random streams are saved and set while the checkpoint writer imports torch."""

import subprocess
import sys
import textwrap
import threading

from workbench.loaded_modules import loaded


def test_a_module_counts_as_loaded_only_once_its_import_has_finished(tmp_path, monkeypatch):
    (tmp_path / "held_gate.py").write_text("import threading\nOPEN = threading.Event()\nSTARTED = threading.Event()\n")
    (tmp_path / "held_import.py").write_text(
        "import held_gate\nheld_gate.STARTED.set()\nheld_gate.OPEN.wait(30)\nVALUE = 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import held_gate

    importer = threading.Thread(target=lambda: __import__("held_import"))
    importer.start()
    try:
        assert held_gate.STARTED.wait(30)
        assert "held_import" in sys.modules  # there already, half built
        assert loaded("held_import") is None
    finally:
        held_gate.OPEN.set()
        importer.join(30)
    assert loaded("held_import").VALUE == 1
    for name in ("held_import", "held_gate"):
        sys.modules.pop(name, None)


def test_streams_are_saved_and_set_while_another_thread_imports_torch():
    # a fresh interpreter, so torch's import really happens beside the saving (it takes
    # ~1 s: thousands of saves fall inside it, as a replica's turns did beside the
    # checkpoint writer's first `import torch`). The loop lets the importer have the GIL after
    # each save (sleep(0)): one that kept it made the importer wait out the switch interval
    # (5 ms) after each of its file reads, and the import took several times as long (a
    # minute in a loaded suite run) for nothing more of what the test needs, saves made
    # while torch is half built (counted, and asserted below)
    script = textwrap.dedent("""
        import sys, threading, time
        from workbench.runtime.state.randomness import Streams
        assert "torch" not in sys.modules
        importer = threading.Thread(target=lambda: __import__("torch"))
        streams, saves, half_built = Streams(), 0, 0
        importer.start()
        while importer.is_alive():
            if "torch" in sys.modules and not hasattr(sys.modules["torch"], "set_rng_state"):
                half_built += 1
            streams.save()
            streams.install()
            saves += 1
            time.sleep(0)
        importer.join()
        streams.save()
        assert streams.torch is not None  # once imported, torch's state is kept
        print("ok", saves, half_built)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    _, saves, half_built = done.stdout.split()
    assert int(half_built) > 0, "the loop never met torch half imported: the test did not test the race"
