"""kube-ccm doctor's cloud probe, on the in-memory apiserver with the simulated cloud."""

from __future__ import annotations

from kube_ccm.app.tools.doctor import _probe_nodes
from kube_ccm.testing.world import World, node_object


async def test_a_provider_id_without_a_scheme_is_probed_not_called_foreign(world: World) -> None:
    world.state.add_instance(
        "n17", zone="zone-b", region="region-1", instance_type="sim.large", instance_id="node-17"
    )
    await world.add(node_object("n17", tainted=False, provider_id="node-17"))
    await world.add(node_object("theirs", tainted=False, provider_id="othercloud://i-1"))

    check = await _probe_nodes(world.cloud, world.client, 5.0)

    assert check.status == "WARN", check
    assert check.detail.startswith("1 Nodes probed;"), check
    assert "1 Nodes have another provider's providerID (left alone), e.g. theirs" in check.detail
    assert world.cloud_calls() == {"InstanceExists": 1}
