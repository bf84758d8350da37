"""``trtllm_replayssm.aot.tensorrt``, the Python side that adds the plugins' layers to a
network, against a stand-in ``tensorrt`` module (TensorRT is not installable here): the
inputs in the order the plugins read them, the fields they are created with (names the
C++ creators know), and the argument errors raised before TensorRT sees anything."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from trtllm_replayssm.aot import tensorrt as rs_trt
from trtllm_replayssm.aot.library import ROUTE_CODES

PLUGIN_SOURCE = Path(__file__).resolve().parents[2] / "plugins" / "tensorrt" / "replayssm_plugins.cpp"


class StandInTensorRT:
    """What the helper calls of TensorRT's Python API, recording the plugins it creates."""

    class PluginFieldType:
        INT32, FLOAT32 = "int32", "float32"

    class TensorRTPhase:
        BUILD = "build"

    def __init__(self, refuse: bool = False):
        self.created, self.refuse = [], refuse

    def PluginField(self, name, data, kind):
        return SimpleNamespace(name=name, value=data.item(), kind=kind)

    def PluginFieldCollection(self, fields):
        return list(fields)

    def get_plugin_registry(self):
        return SimpleNamespace(get_creator=self._creator)

    def _creator(self, name, version, namespace):
        assert (version, namespace) == ("1", "replayssm")

        def create_plugin(plugin_name, fields, phase):
            assert plugin_name == name and phase == "build"
            self.created.append((name, {f.name: f.value for f in fields}))
            return None if self.refuse else SimpleNamespace(name=name)

        return SimpleNamespace(create_plugin=create_plugin)


class Network:
    def __init__(self):
        self.layers = []

    def add_plugin_v3(self, inputs, shape_inputs, plugin):
        self.layers.append((plugin.name, inputs))
        outputs = {"ReplaySSMMamba2Step": 2 if len(inputs) < 13 else 5, "ReplaySSMGDNStep": 5}.get(plugin.name, 1)
        return SimpleNamespace(num_outputs=outputs, get_output=lambda i: f"{plugin.name}:out{i}")


@pytest.fixture
def trt(monkeypatch):
    stand_in = StandInTensorRT()
    monkeypatch.setitem(sys.modules, "tensorrt", stand_in)
    return stand_in


MAMBA2 = ["state", "x", "dt", "A", "B", "C", "D", "dt_bias", "slot_idx"]
RINGS = ["x_cache", "dt_cache", "B_cache", "write_pos"]


def test_mamba2_step_with_network_rings(trt):
    net = Network()
    outs = rs_trt.add_mamba2_step(net, *MAMBA2, rings=RINGS, z="z", force_flush="ff", route="always_flush")
    assert net.layers == [("ReplaySSMMamba2Step", MAMBA2 + RINGS + ["z", "ff"])]
    assert len(outs) == 5  # y, then the state and rings in place
    name, fields = trt.created[0]
    assert fields == dict(route=ROUTE_CODES["always_flush"], pad_slot_id=-1, has_z=1, has_force_flush=1, has_reset=0,
                          owns_rings=0, max_slots=0, buffer_len=16)


@pytest.mark.parametrize("route, flush_all", [("output_only", 0), ("standard_step", 1), ("always_flush", 1)])
def test_advance_resets_the_cursors_after_routes_that_store_every_row(trt, route, flush_all):
    rs_trt.add_advance(Network(), "write_pos", "slot_idx", buffer_len=16, route=route)
    assert trt.created[0][1]["flush_all"] == flush_all


def test_mamba2_step_with_owned_rings(trt):
    net = Network()
    rs_trt.add_mamba2_step(net, *MAMBA2, new_slots="new", max_slots=256, buffer_len=8)
    assert net.layers == [("ReplaySSMMamba2Step", MAMBA2 + ["new"])]
    fields = trt.created[0][1]
    assert (fields["owns_rings"], fields["has_reset"], fields["max_slots"], fields["buffer_len"]) == (1, 1, 256, 8)


def test_gdn_step_and_advance(trt):
    net = Network()
    gdn = ["state", "q", "k", "v", "a", "b", "A_log", "dt_bias", "slot_idx", "d_cache", "k_cache", "g_cache",
           "write_pos"]
    rs_trt.add_gdn_step(net, *gdn, force_flush="ff", scale=0.125)
    rs_trt.add_advance(net, "write_pos", "slot_idx", buffer_len=16, route="always_flush")
    rs_trt.add_reset(net, "write_pos", "new_slots", pad_slot_id=0)
    assert net.layers == [("ReplaySSMGDNStep", gdn + ["ff"]), ("ReplaySSMAdvance", ["write_pos", "slot_idx"]),
                          ("ReplaySSMReset", ["write_pos", "new_slots"])]
    assert trt.created[0][1] == dict(route=0, pad_slot_id=-1, has_force_flush=1, scale=0.125)
    assert trt.created[1][1] == dict(buffer_len=16, flush_all=1, has_force_flush=0, pad_slot_id=-1)
    assert trt.created[2][1] == dict(pad_slot_id=0)


def test_every_field_is_one_the_creators_read(trt):
    """A field name the C++ creator does not know would be dropped silently there."""
    known = set(re.findall(r'i32\("(\w+)"', PLUGIN_SOURCE.read_text())) | {"scale"}
    net = Network()
    rs_trt.add_mamba2_step(net, *MAMBA2, rings=RINGS, z="z", force_flush="ff")
    rs_trt.add_mamba2_step(net, *MAMBA2, new_slots="new", max_slots=4)
    rs_trt.add_gdn_step(net, *(["t"] * 13))
    rs_trt.add_advance(net, "w", "s", buffer_len=16)
    rs_trt.add_reset(net, "w", "n")
    used = {name for _, fields in trt.created for name in fields}
    assert used <= known, used - known


def test_bad_arguments_raise_before_tensorrt_sees_them(trt):
    net = Network()
    with pytest.raises(ValueError, match="max_slots"):
        rs_trt.add_mamba2_step(net, *MAMBA2)  # owned rings, no pool size
    with pytest.raises(ValueError, match="new_slots is for plugin-owned rings"):
        rs_trt.add_mamba2_step(net, *MAMBA2, rings=RINGS, new_slots="new")
    with pytest.raises(ValueError, match="rings must be"):
        rs_trt.add_mamba2_step(net, *MAMBA2, rings=RINGS[:3])
    with pytest.raises(ValueError, match="route must be one of"):
        rs_trt.add_gdn_step(net, *(["t"] * 13), route="state_and_output")
    with pytest.raises(ValueError, match="route must be one of"):
        rs_trt.add_advance(net, "w", "s", buffer_len=16, route="auto")
    with pytest.raises(ValueError, match="keeps no ring"):
        rs_trt.add_advance(net, "w", "s", buffer_len=16, route="standard")
    assert net.layers == [] and trt.created == []


def test_a_refused_plugin_is_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", StandInTensorRT(refuse=True))
    with pytest.raises(RuntimeError, match="refused its fields"):
        rs_trt.add_advance(Network(), "w", "s", buffer_len=65)
