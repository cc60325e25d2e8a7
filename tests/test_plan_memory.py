"""`caraml plan`'s GPT estimate (caraml.estimate.llm) beside test_plan.py's: the optimizer states under each
distributed optimizer at dp > 1 (ZeRO-1, CARAML's setting, shards only AdamW's moments), and which link each
group's traffic crosses when the group's ranks span nodes. Numbers worked out by hand."""

from __future__ import annotations

import pytest
from test_plan import _cfg

from caraml.estimate import llm

PARAMS = 132_864  # test_plan's small model on one device: 2 layers of 49,984, vocabulary 512 x 64, final norm


@pytest.mark.parametrize("dp", [2, 4])
@pytest.mark.parametrize("optimizer, states, grads", [
    ("zero1", lambda dp: 8 * PARAMS + 8 * PARAMS / dp, lambda dp: 4 * PARAMS),  # the moments / dp, the rest whole
    ("fsdp", lambda dp: 16 * PARAMS / dp + 4 * PARAMS, lambda dp: 4 * PARAMS / dp),  # all / dp, gathered in the step
    ("off", lambda dp: 16 * PARAMS, lambda dp: 4 * PARAMS),  # DDP: every replica holds everything
], ids=["zero1", "fsdp", "off"])
def test_optimizer_states_per_device_under_each_distributed_optimizer(optimizer, states, grads, dp):
    mem = llm.memory(_cfg(distributed_optimizer=optimizer), llm.Layout(devices=dp, devices_per_node=4, tp=1, pp=1,
                                                                       dp=dp))
    assert mem["parameters_per_device"] == PARAMS
    assert mem["states_bytes"] == states(dp) and mem["gradients_bytes"] == grads(dp)
    assert mem["sharded"] is (optimizer != "off")
    assert mem["peak_at"] == "backward"  # fp32, no accumulation: the gradients are not there yet
    assert mem["total_bytes"] == (states(dp) - grads(dp) + mem["activations_bytes"] + mem["loss_bytes"]
                                  + llm.CUDA_WORKSPACE_BYTES)


def test_zero1_at_one_replica_shards_nothing():
    mem = llm.memory(_cfg(distributed_optimizer="zero1"), llm.Layout(devices=1, devices_per_node=1, tp=1, pp=1,
                                                                      dp=1))
    assert mem["states_bytes"] == 16 * PARAMS and not mem["sharded"]


@pytest.mark.parametrize("tp, pp, dp, per_node, where", [
    (4, 1, 2, 4, {"tp": "intra", "dp": "inter"}),  # each node one tp group: dp pairs across nodes
    (2, 2, 2, 4, {"tp": "intra", "dp": "intra", "pp": "inter"}),  # tp x dp = 4 ranks fill one node
    (1, 2, 4, 4, {"dp": "intra", "pp": "inter"}),  # each stage's replicas on one node
    (1, 1, 8, 4, {"dp": "inter"}),  # dp over both nodes
    (2, 1, 4, 8, {"tp": "intra", "dp": "intra"}),  # one node: everything within it
    (8, 1, 1, 4, {"tp": "inter"}),  # tp wider than a node
])
def test_a_group_crosses_nodes_when_its_ranks_span_them(tp, pp, dp, per_node, where):
    """Only the groups of more than one rank, which carry traffic."""
    found = llm.links(llm.Layout(devices=tp * pp * dp, devices_per_node=per_node, tp=tp, pp=pp, dp=dp))
    assert {group: found[group] for group in where} == where


def test_inter_node_dp_traffic_is_timed_at_the_inter_node_bandwidth():
    cfg = _cfg(tp=4, precision="bf16")
    layout = llm.Layout(devices=8, devices_per_node=4, tp=4, pp=1, dp=2)
    profile = {"peak_tflops": {"bf16": 100.0}, "links_gbps": {"intra_node": 100.0, "inter_node": 10.0}}
    est = llm.estimate(cfg, layout, profile, efficiency=0.5)
    comm = est["communication"]
    assert comm["dp_bytes"] > 0 and comm["tp_bytes"] > 0 and comm["pp_bytes"] == 0
    assert est["communication_s"] == pytest.approx(comm["tp_bytes"] / 100e9 + comm["dp_bytes"] / 10e9)
