"""GPU values on the wire, pinned on the CPU: tensors and device arrays cross processes as
host buffers with their device recorded, and land on the CPU where that device is missing;
a value that does not unpickle fails the waiting replica with its own error."""

from __future__ import annotations

import io
import pickle
import secrets
import threading
import time

import numpy as np
import pytest
import torch

from workbench.runtime.transport import channels
from workbench.runtime.transport.channels import Mailbox, SocketServer, dumps, dumps_state
from workbench.runtime.transport.socket_postman import SocketPostman


class FakeDevice:
    id = 1


class FakeCupyArray:
    """Stands in for a ``cupy.ndarray`` on GPU 1: what the pickler sees of one."""

    def __init__(self, array):
        self.array = array
        self.device = FakeDevice()

    def get(self):
        return self.array.copy()


FakeCupyArray.__module__ = "cupy._core.core"
FakeCupyArray.__name__ = FakeCupyArray.__qualname__ = "ndarray"


@pytest.mark.parametrize("dump", [dumps, dumps_state], ids=["channel", "state"])
def test_cpu_tensors_and_parameters_round_trip_through_one_path(dump):
    weight = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    value = {"w": weight, "f": frozen, "t": torch.arange(3), "g": torch.zeros(2, requires_grad=True)}
    back = pickle.loads(dump(value))
    assert isinstance(back["w"], torch.nn.Parameter) and back["w"].requires_grad
    assert isinstance(back["f"], torch.nn.Parameter) and not back["f"].requires_grad
    assert back["g"].requires_grad and back["g"].is_leaf
    assert torch.equal(back["w"], weight) and torch.equal(back["t"], torch.arange(3))
    assert all(v.device.type == "cpu" for v in back.values())


def test_shared_parameters_stay_shared():
    weight = torch.nn.Parameter(torch.ones(2))
    back = pickle.loads(dumps_state([weight, weight]))
    assert back[0] is back[1]


def test_both_picklers_reduce_tensors_the_same_way():
    tensor = torch.arange(4.0)
    assert channels._Pickler(io.BytesIO()).reducer_override(tensor)[0] is channels._restore_tensor
    reduced = channels._reduce_array_value(tensor)
    assert reduced[0] is channels._restore_tensor and reduced[1][3] == "cpu"


@pytest.mark.parametrize("dump", [dumps, dumps_state], ids=["channel", "state"])
def test_one_view_of_one_storage_travels_once_and_arrives_tied(dump):
    """A tied embedding: two names of one tensor in a state dict (a language model's
    largest matrix) are one host array on the wire and one tensor on arrival."""
    embedding = torch.nn.Embedding(1000, 64)
    weights = {
        "embed.weight": embedding.weight.detach(),
        "head.weight": embedding.weight.detach(),
        "halves": [embedding.weight.detach()[:500], embedding.weight.detach()[500:]],
    }
    untied = {"embed.weight": embedding.weight.detach().clone(), "head.weight": embedding.weight.detach().clone()}
    back = pickle.loads(dump(weights))
    assert back["embed.weight"].data_ptr() == back["head.weight"].data_ptr()
    assert torch.equal(back["head.weight"], embedding.weight)
    first, second = back["halves"]  # other views of the storage: each its own array, as before
    assert (
        torch.equal(torch.cat([first, second]), embedding.weight)
        and first.data_ptr() != back["embed.weight"].data_ptr()
    )
    assert len(dump({k: weights[k] for k in untied})) < 0.6 * len(dump(untied))


def test_a_cuda_tensor_lands_on_the_cpu_where_there_is_no_gpu(monkeypatch):
    monkeypatch.setattr("workbench.devices._claimed", 0)
    array = np.arange(3, dtype=np.float32)
    restored = channels._restore_tensor(array, False, False, "cuda:1")
    assert restored.device.type == "cpu" and restored.tolist() == [0.0, 1.0, 2.0]
    param = channels._restore_tensor(array, True, True, "cuda:0")
    assert isinstance(param, torch.nn.Parameter) and param.requires_grad


def test_the_arrival_device_is_kept_only_where_this_process_has_it(monkeypatch):
    monkeypatch.setattr("workbench.devices._claimed", 2)
    assert channels._arrival_device("cuda:1") == "cuda:1"
    assert channels._arrival_device("cuda:2") == "cpu"
    assert channels._arrival_device("cpu") == "cpu"


@pytest.mark.parametrize("dump", [dumps, dumps_state], ids=["channel", "state"])
def test_a_cupy_array_travels_as_host_buffer_with_its_device(dump):
    sent = FakeCupyArray(np.arange(4, dtype=np.int32))
    assert channels._reduce_array_value(sent)[1][1] == "cuda:1"
    back = pickle.loads(dump({"obs": sent}))
    # no usable GPU here: the NumPy array, not an error (snapshots open in the notebook)
    assert isinstance(back["obs"], np.ndarray) and back["obs"].tolist() == [0, 1, 2, 3]


def test_old_pickles_still_load():
    tensor = channels._tensor_from_numpy(np.ones(2, np.float32), True)
    param = channels._parameter_from_numpy(np.ones(2, np.float32), False)
    assert tensor.requires_grad and isinstance(param, torch.nn.Parameter)


class Unloadable:
    """Pickles fine; fails to unpickle on the receiving side."""

    def __reduce__(self):
        return (_explode, ())


def _explode():
    raise ValueError("this class cannot be rebuilt here")


def test_an_unpickling_error_reaches_the_waiting_replica():
    key = secrets.token_bytes(16)
    box = Mailbox()
    server = SocketServer(box, "127.0.0.1", key)
    postman = SocketPostman({("learner", 0): server.address}, key)
    try:
        postman.send(("learner", 0), "weights", 0, 0, Unloadable())
        with pytest.raises(ValueError, match="cannot be rebuilt") as info:
            deadline = time.monotonic() + 10  # before the fix: Stopped after 10 s, not the cause
            box.take("weights", 0, 0, stopped=lambda: time.monotonic() > deadline)
        assert any("workbench channel" in note for note in info.value.__notes__)
    finally:
        postman.close()
        server.close()


def test_a_failed_mailbox_wakes_a_waiter_already_blocked():
    box = Mailbox(arrival_keys=("grads",))
    caught = []

    def wait():
        try:
            box.take_next("grads", stopped=lambda: False)
        except RuntimeError as exc:
            caught.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.1)
    box.fail(RuntimeError("bad message"))
    thread.join(5)
    assert [str(e) for e in caught] == ["bad message"]
