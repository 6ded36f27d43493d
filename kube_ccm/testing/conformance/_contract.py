"""Contract-level checks: the provider called directly, as the controllers call it."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import msgspec
import pytest
import pytest_asyncio

from kube_ccm.api.objects import Node, NodeSpec, ObjectMeta, Service, ServicePort
from kube_ccm.cloudprovider import (
    CloudProvider,
    ImplementedElsewhereError,
    InstanceNotFoundError,
    NotImplementedByProviderError,
    Route,
)
from kube_ccm.testing.conformance._harness import (
    Conformance,
    lb_service,
    open_conformance,
    pod_cidr,
    ready_node,
    unique,
)
from kube_ccm.testing.conformance._known import KnownFailures
from kube_ccm.testing.conformance._target import ConformanceTarget

MAX_CANCELLATION_POINTS = 16
"""How many points of one ``ensure_load_balancer`` call the cancellation check cancels at."""

_ACCESSORS = ("instances_v2", "instances", "zones", "load_balancer", "routes", "clusters")


async def _outcome(call: Awaitable[Any]) -> tuple[bool, Any]:
    """``(True, result)`` or ``(False, exception)``; the kit's own failures (timeouts,
    a builtin NotImplementedError) propagate."""
    try:
        return True, await call
    except AssertionError:
        raise
    except Exception as exc:
        return False, exc


def cancellation_points(turns: int) -> list[int]:
    """Event-loop turns after which to cancel a call that takes ``turns`` turns: every
    one for a short call, else the first few and an even spread over the rest."""
    if turns < MAX_CANCELLATION_POINTS:
        return list(range(turns + 1))
    first = (0, 1, 2, 3)
    n = MAX_CANCELLATION_POINTS - len(first)
    return sorted({*first, *(round(i * turns / (n - 1)) for i in range(n))})


class ContractChecks(KnownFailures):
    """The provider called directly: the obligations in the docstrings of
    ``kube_ccm/cloudprovider/_interface.py``. Fast (no cluster); each check skips,
    saying why, when the provider lacks the capability or the target lacks a driver.

    A check takes a capability anew at each use (``v2 = conformance.instances_v2``, then
    ``v2().instance_exists(...)``; the first ``v2()`` skips the check if it is missing):
    after a change of a driver that is not live, the kit has built a new provider."""

    @pytest_asyncio.fixture
    async def conformance(
        self, conformance_provider: ConformanceTarget
    ) -> AsyncIterator[Conformance]:
        """The target opened for one check: provider built and initialised, closed after,
        with the instances the check made deleted."""
        async with open_conformance(conformance_provider) as opened:
            yield opened

    # -- the provider ------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_capability_accessors_return_the_same_object_every_time(
        self, conformance: Conformance
    ) -> None:
        """Accessors "return the same object on every call; controllers may call an
        accessor more than once". And a provider has a name, its providerIDs' scheme."""
        provider: CloudProvider = conformance.provider
        name = provider.provider_name()
        assert isinstance(name, str), f"provider_name() returned {name!r}, not a string"
        assert name, "provider_name() is empty"
        for bad in ("://", "/"):
            assert bad not in name, (
                f"provider_name() {name!r} cannot be the scheme of a providerID <name>://<id>"
            )
        for accessor in _ACCESSORS:
            first = getattr(provider, accessor)()
            second = getattr(provider, accessor)()
            assert first is second, (
                f"{accessor}() returned two different objects; return the same one each time"
            )

    # -- InstancesV2 ----------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_instance_metadata_gives_a_provider_id_of_the_providers_scheme(
        self, conformance: Conformance
    ) -> None:
        """A new instance's metadata names it ``<provider_name()>://<id>``, and the Node
        that then carries that providerID maps to the same instance."""
        v2 = conformance.instances_v2
        v2()
        name = await conformance.create_instance()
        metadata = await conformance.call(
            "InstanceMetadata", v2().instance_metadata(ready_node(name))
        )
        assert metadata is not None, (
            f"instance_metadata returned None for the Node {name} of a running instance: "
            "the Node would stay uninitialised"
        )
        scheme = f"{conformance.provider.provider_name()}://"
        assert metadata.provider_id.startswith(scheme), (
            f"providerID {metadata.provider_id!r} does not start with {scheme!r}"
        )
        assert len(metadata.provider_id) > len(scheme), "the providerID has no instance ID"
        by_id = ready_node(name, provider_id=metadata.provider_id)
        again = await conformance.call("InstanceMetadata", v2().instance_metadata(by_id))
        assert again is not None, "instance_metadata of the initialised Node returned None"
        assert again.provider_id == metadata.provider_id, (
            f"the initialised Node maps to {again.provider_id!r}, not to {metadata.provider_id!r}"
        )

    @pytest.mark.asyncio
    async def test_an_authoritative_instance_belongs_to_its_own_node_only(
        self, conformance: Conformance
    ) -> None:
        """With ``authoritative = True`` (the kubelet serving certificate approver rests
        on it): ``instance_belongs_to`` says an instance is its own Node's, and not the
        Node's of another name that carries its providerID (a node may write its own
        providerID), answering from a Node with only a name and a providerID."""
        v2 = conformance.instances_v2
        v2()
        if not v2().authoritative:
            pytest.skip(
                "the instances are not authoritative (the contract's default): the kubelet "
                "serving certificate approver refuses to start with this provider"
            )
        name = await conformance.create_instance()
        other = await conformance.create_instance("other")
        provider_id = await conformance.provider_id_of(name)
        bare = Node(metadata=ObjectMeta(name=name), spec=NodeSpec(provider_id=provider_id))
        metadata = await conformance.call("InstanceMetadata", v2().instance_metadata(bare))
        assert metadata is not None, f"instance_metadata of the Node {name} returned None"
        mine = await conformance.call("InstanceBelongsTo", v2().instance_belongs_to(name, metadata))
        assert mine is True, (
            f"instance_belongs_to({name!r}, its own instance's metadata) is {mine!r}: no "
            "kubelet serving certificate would ever be approved on this cloud"
        )
        theirs = await conformance.call(
            "InstanceBelongsTo", v2().instance_belongs_to(other, metadata)
        )
        assert theirs is False, (
            f"instance_belongs_to({other!r}, the metadata of {name}'s instance) is "
            f"{theirs!r}: a Node {other} that set its providerID to {provider_id} would "
            f"get a certificate for {name}'s names and addresses"
        )

    @pytest.mark.asyncio
    async def test_a_running_instance_exists_and_is_not_shut_down(
        self, conformance: Conformance
    ) -> None:
        v2 = conformance.instances_v2
        v2()
        name = await conformance.create_instance()
        provider_id = await conformance.provider_id_of(name)
        for node in (ready_node(name), ready_node(name, provider_id=provider_id)):
            how = f"the Node {name} (providerID {node.spec.provider_id or 'unset'})"
            exists = await conformance.call("InstanceExists", v2().instance_exists(node))
            assert exists is True, f"instance_exists of {how} is {exists!r}, not True"
            down = await conformance.call("InstanceShutdown", v2().instance_shutdown(node))
            assert down is False, f"instance_shutdown of {how} is {down!r}, not False"

    @pytest.mark.asyncio
    async def test_a_stopped_instance_still_exists_and_is_shut_down(
        self, conformance: Conformance
    ) -> None:
        """Stopped instances exist ("stopped ones included"), and are shut down until
        started again."""
        v2 = conformance.instances_v2
        v2()
        name = await conformance.create_instance()
        node = ready_node(name, provider_id=await conformance.provider_id_of(name))
        await conformance.stop_instance(name)
        exists = await conformance.call("InstanceExists", v2().instance_exists(node))
        assert exists is True, (
            f"instance_exists of the stopped instance is {exists!r}: False would delete "
            "its Node, which only has to wait for the instance to start"
        )
        down = await conformance.call("InstanceShutdown", v2().instance_shutdown(node))
        assert down is True, f"instance_shutdown of the stopped instance is {down!r}"
        await conformance.start_instance(name)
        down = await conformance.call("InstanceShutdown", v2().instance_shutdown(node))
        assert down is False, f"instance_shutdown after it started again is {down!r}"

    @pytest.mark.asyncio
    async def test_a_deleted_instance_does_not_exist(self, conformance: Conformance) -> None:
        """Once the instance is really gone, ``instance_exists`` is False (by providerID
        and by name) and ``instance_metadata`` reports nothing."""
        v2 = conformance.instances_v2
        v2()
        name = await conformance.create_instance()
        provider_id = await conformance.provider_id_of(name)
        await conformance.delete_instance(name)
        for node in (ready_node(name, provider_id=provider_id), ready_node(name)):
            how = f"the Node {name} (providerID {node.spec.provider_id or 'unset'})"
            exists = await conformance.call("InstanceExists", v2().instance_exists(node))
            assert exists is False, (
                f"instance_exists of {how} is {exists!r} after its instance was deleted: "
                "the NotReady Node would never be deleted"
            )
            ok, answer = await _outcome(v2().instance_metadata(node))
            assert not ok or answer is None, (
                f"instance_metadata of {how} returned {answer!r} after its instance was "
                "deleted; raise (InstanceNotFoundError) or return None"
            )

    @pytest.mark.asyncio
    async def test_an_api_error_is_raised_not_reported_as_a_missing_instance(
        self, conformance: Conformance
    ) -> None:
        """An outage of the cloud's API never makes ``instance_exists`` False ("Return
        False only if the instance is really gone ... When unsure, raise")."""
        v2 = conformance.instances_v2
        v2()
        name = await conformance.create_instance()
        provider_id = await conformance.provider_id_of(name)
        raised = 0
        async with conformance.api_errors():
            for node in (ready_node(name, provider_id=provider_id), ready_node(name)):
                how = f"the Node {name} (providerID {node.spec.provider_id or 'unset'})"
                ok, answer = await _outcome(v2().instance_exists(node))
                assert not ok or answer is not False, (
                    f"instance_exists of {how} returned False while the cloud's API failed: "
                    "the daemon would delete a NotReady Node whose instance still runs; raise"
                )
                raised += not ok
                ok, answer = await _outcome(v2().instance_metadata(node))
                raised += not ok
        assert raised, (
            "no call failed while the driver's api_errors() was active: it does not reach "
            "the provider, so this check proves nothing; fix the driver"
        )

    # -- Instances (V1) ---------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_v1_a_running_or_stopped_instance_exists_with_an_instance_id(
        self, conformance: Conformance
    ) -> None:
        v1 = conformance.instances_v1
        v1()
        name = await conformance.create_instance()
        instance_id = await conformance.call("InstanceID", v1().instance_id(name))
        assert instance_id, f"instance_id of the running instance of {name} is empty"
        provider_id = f"{conformance.provider.provider_name()}://{instance_id}"
        await conformance.stop_instance(name)
        exists = await conformance.call(
            "InstanceExistsByProviderID", v1().instance_exists_by_provider_id(provider_id)
        )
        assert exists is True, f"instance_exists_by_provider_id of a stopped instance: {exists!r}"
        again = await conformance.call("InstanceID", v1().instance_id(name))
        assert again == instance_id, (
            f"instance_id of the stopped instance is {again!r}, not {instance_id!r}"
        )
        ok, down = await _outcome(v1().instance_shutdown_by_provider_id(provider_id))
        if ok:
            assert down is True, f"instance_shutdown_by_provider_id of a stopped instance: {down!r}"
        else:
            assert isinstance(down, NotImplementedByProviderError), (
                f"instance_shutdown_by_provider_id of a stopped instance raised {down!r}"
            )

    @pytest.mark.asyncio
    async def test_v1_a_deleted_instance_raises_instance_not_found(
        self, conformance: Conformance
    ) -> None:
        """V1 ``instance_id`` raises ``InstanceNotFoundError`` for a missing instance (the
        lifecycle controller then deletes the NotReady Node), and existence is False."""
        v1 = conformance.instances_v1
        v1()
        name = await conformance.create_instance()
        instance_id = await conformance.call("InstanceID", v1().instance_id(name))
        provider_id = f"{conformance.provider.provider_name()}://{instance_id}"
        await conformance.delete_instance(name)
        ok, answer = await _outcome(v1().instance_id(name))
        assert not ok, f"instance_id of a deleted instance returned {answer!r}"
        assert isinstance(answer, InstanceNotFoundError), (
            f"instance_id of a deleted instance raised {answer!r}; raise InstanceNotFoundError"
        )
        exists = await conformance.call(
            "InstanceExistsByProviderID", v1().instance_exists_by_provider_id(provider_id)
        )
        assert exists is False, f"instance_exists_by_provider_id after deletion: {exists!r}"

    @pytest.mark.asyncio
    async def test_v1_an_api_error_is_not_instance_not_found(
        self, conformance: Conformance
    ) -> None:
        """During an outage neither ``InstanceNotFoundError`` from ``instance_id`` nor
        False from ``instance_exists_by_provider_id``: both delete the NotReady Node."""
        v1 = conformance.instances_v1
        v1()
        name = await conformance.create_instance()
        instance_id = await conformance.call("InstanceID", v1().instance_id(name))
        provider_id = f"{conformance.provider.provider_name()}://{instance_id}"
        raised = 0
        async with conformance.api_errors():
            ok, answer = await _outcome(v1().instance_id(name))
            assert not isinstance(answer, InstanceNotFoundError), (
                "instance_id raised InstanceNotFoundError while the cloud's API failed; the "
                "lifecycle controller would delete the NotReady Node: raise another error"
            )
            raised += not ok
            ok, answer = await _outcome(v1().instance_exists_by_provider_id(provider_id))
            assert not ok or answer is not False, (
                "instance_exists_by_provider_id returned False while the cloud's API failed; "
                "raise instead"
            )
            raised += not ok
        assert raised, (
            "no call failed while the driver's api_errors() was active: it does not reach "
            "the provider, so this check proves nothing; fix the driver"
        )

    # -- LoadBalancer ---------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_ensure_load_balancer_twice_gives_the_same_status(
        self, conformance: Conformance
    ) -> None:
        conformance.load_balancer()
        nodes = [await conformance.backend_node()]
        service = lb_service(unique("twice"))
        try:
            first = await conformance.ensure_load_balancer(service, nodes)
            second = await conformance.ensure_load_balancer(service, nodes)
            assert second == first, (
                f"the second ensure_load_balancer of an unchanged Service gave {second}, "
                f"the first {first}: the Service's status would flap"
            )
            got = await conformance.get_load_balancer(service)
            assert got == first, f"get_load_balancer gives {got}, ensure gave {first}"
        finally:
            await conformance.delete_load_balancer(service)

    @pytest.mark.asyncio
    async def test_get_load_balancer_is_none_before_ensure_and_after_delete(
        self, conformance: Conformance
    ) -> None:
        conformance.load_balancer()
        nodes = [await conformance.backend_node()]
        service = lb_service(unique("get"))
        before = await conformance.get_load_balancer(service)
        assert before is None, f"get_load_balancer before any ensure gives {before}, not None"
        try:
            await conformance.ensure_load_balancer(service, nodes)
            during = await conformance.get_load_balancer(service)
            assert during is not None, "get_load_balancer after ensure_load_balancer is None"
        finally:
            await conformance.delete_load_balancer(service)
        after = await conformance.get_load_balancer(service)
        assert after is None, f"get_load_balancer after ensure_load_balancer_deleted: {after}"

    @pytest.mark.asyncio
    async def test_ensure_load_balancer_deleted_succeeds_twice_and_when_never_created(
        self, conformance: Conformance
    ) -> None:
        """Idempotent, "succeed when it is already gone" (and never
        ``ImplementedElsewhereError``): the finalizer is released only after it returns."""
        conformance.load_balancer()
        nodes = [await conformance.backend_node()]
        never = lb_service(unique("never"))
        service = lb_service(unique("twice"))
        await self._delete_must_succeed(conformance, never, "a never-created load balancer")
        await conformance.ensure_load_balancer(service, nodes)
        await self._delete_must_succeed(conformance, service, "the load balancer")
        await self._delete_must_succeed(conformance, service, "an already deleted load balancer")

    @staticmethod
    async def _delete_must_succeed(conformance: Conformance, service: Service, what: str) -> None:
        try:
            await conformance.delete_load_balancer(service)
        except AssertionError:
            raise
        except ImplementedElsewhereError as exc:
            raise AssertionError(
                f"ensure_load_balancer_deleted of {what} raised ImplementedElsewhereError, "
                "which it must not"
            ) from exc
        except Exception as exc:
            raise AssertionError(
                f"ensure_load_balancer_deleted of {what} raised {exc!r}; it must succeed "
                "when the load balancer is already gone, or the Service is never deleted"
            ) from exc

    @pytest.mark.asyncio
    async def test_the_load_balancer_name_is_stable(self, conformance: Conformance) -> None:
        """The name depends on nothing that changes during the Service's life (ports,
        annotations, resourceVersion, having a load balancer); with an inventory, a
        Service carrying only namespace, name and UID gets the same name too."""
        lb = conformance.load_balancer
        lb()
        cluster = conformance.cluster_name
        service = lb_service(unique("name"))
        name = lb().get_load_balancer_name(cluster, service)
        assert name, "get_load_balancer_name is empty"
        assert lb().get_load_balancer_name(cluster, service) == name, "two calls, two names"
        changed = msgspec.structs.replace(
            service,
            metadata=msgspec.structs.replace(
                service.metadata,
                resource_version="2",
                annotations={"conformance.kube-ccm.io/touched": "yes"},
            ),
            spec=msgspec.structs.replace(
                service.spec, ports=(ServicePort(name="https", port=443, node_port=30443),)
            ),
        )
        nodes = [await conformance.backend_node()]
        try:
            await conformance.ensure_load_balancer(service, nodes)
            after = lb().get_load_balancer_name(cluster, service)
            assert after == name, f"the name changed after ensure: {name!r} -> {after!r}"
            later = lb().get_load_balancer_name(cluster, changed)
            assert later == name, (
                f"the name changed with the Service's ports and annotations: {name!r} -> "
                f"{later!r}; the old load balancer would leak"
            )
            if conformance.inventory() is not None:
                meta = service.metadata
                skeleton = Service(
                    metadata=ObjectMeta(namespace=meta.namespace, name=meta.name, uid=meta.uid)
                )
                bare = lb().get_load_balancer_name(cluster, skeleton)
                assert bare == name, (
                    f"a Service with only namespace, name and UID gets the name {bare!r}, not "
                    f"{name!r}: kube-ccm gc could not delete its leaked load balancer"
                )
        finally:
            await conformance.delete_load_balancer(service)

    @pytest.mark.asyncio
    async def test_update_load_balancer_changes_the_backends_and_nothing_else(
        self, conformance: Conformance
    ) -> None:
        conformance.load_balancer()
        first = await conformance.backend_node()
        second = await conformance.backend_node()
        service = lb_service(unique("update"))
        try:
            status = await conformance.ensure_load_balancer(service, [first])
            for nodes in ([first, second], [second], []):
                await conformance.update_load_balancer(service, nodes)
                got = await conformance.get_load_balancer(service)
                assert got == status, (
                    f"after update_load_balancer with {len(nodes)} Nodes the status is "
                    f"{got}, not {status}: it must change the backends only"
                )
        finally:
            await conformance.delete_load_balancer(service)

    @pytest.mark.asyncio
    async def test_a_cancelled_ensure_load_balancer_leaves_nothing_behind(
        self, conformance: Conformance
    ) -> None:
        """The daemon cancels calls (deadline, shutdown, lost leadership). Cancelled at
        any point, ``ensure_load_balancer`` leaves nothing that
        ``ensure_load_balancer_deleted`` does not remove: afterwards ``get_load_balancer``
        is None and the inventory (if any) does not list it, then and a moment later."""
        lb = conformance.load_balancer
        lb()
        cluster = conformance.cluster_name
        nodes = [await conformance.backend_node()]
        probe = lb_service(unique("probe"))
        task = asyncio.create_task(lb().ensure_load_balancer(cluster, probe, nodes))
        turns = 0
        async with asyncio.timeout(conformance.target.call_timeout):
            while not task.done():
                await asyncio.sleep(0)
                turns += 1
        task.result()
        await conformance.delete_load_balancer(probe)

        cancelled: list[tuple[str, Service]] = []
        for point in cancellation_points(turns):
            service = lb_service(unique("cancel"))
            where = f"cancelled after {point} of the {turns} event-loop turns one ensure takes"
            cancelled.append((where, service))
            task = asyncio.create_task(lb().ensure_load_balancer(cluster, service, nodes))
            for _ in range(point):
                if task.done():
                    break
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task  # a cancelled call may also fail; what it left matters
            await conformance.delete_load_balancer(service)
            await self._nothing_left(conformance, service, where)
        await asyncio.sleep(0.2)  # work the cancelled calls left running, landing late
        for where, service in cancelled:
            await self._nothing_left(conformance, service, f"{where}, 0.2 s later")

    @staticmethod
    async def _nothing_left(conformance: Conformance, service: Service, where: str) -> None:
        got = await conformance.get_load_balancer(service)
        assert got is None, (
            f"ensure_load_balancer {where}, then ensure_load_balancer_deleted: "
            f"get_load_balancer still gives {got}"
        )
        listed = await conformance.listed_uids()
        assert service.metadata.uid not in listed, (
            f"ensure_load_balancer {where}, then ensure_load_balancer_deleted: "
            f"list_load_balancers still lists the Service's load balancer (a leak)"
        )

    @pytest.mark.asyncio
    async def test_the_inventory_lists_what_it_made_for_this_cluster_only(
        self, conformance: Conformance
    ) -> None:
        """``list_load_balancers(cluster_name)`` lists an ensured load balancer with its
        name and Service, not under another cluster name, and not once deleted."""
        lb = conformance.load_balancer
        lb()
        if conformance.inventory() is None:
            pytest.skip("provider's load_balancer() is no LoadBalancerInventory")
        cluster = conformance.cluster_name
        service = lb_service(unique("inv"))
        nodes = [await conformance.backend_node()]
        try:
            await conformance.ensure_load_balancer(service, nodes)
            owned = await conformance.list_load_balancers()
            mine = [o for o in owned if o.service_uid == service.metadata.uid]
            assert len(mine) == 1, (
                f"list_load_balancers lists the ensured load balancer {len(mine)} times: {owned}"
            )
            assert (mine[0].name, mine[0].namespace, mine[0].service_name) == (
                lb().get_load_balancer_name(cluster, service),
                service.metadata.namespace,
                service.metadata.name,
            ), f"listed as {mine[0]}; expected its name, namespace and Service name"
            other = f"other-{uuid.uuid4().hex[:6]}"
            assert service.metadata.uid not in await conformance.listed_uids(other), (
                f"list_load_balancers({other!r}) lists a load balancer made for cluster "
                f"{cluster!r}: never list what this cluster did not make"
            )
        finally:
            await conformance.delete_load_balancer(service)
        assert service.metadata.uid not in await conformance.listed_uids(), (
            "list_load_balancers still lists the load balancer after ensure_load_balancer_deleted"
        )

    # -- Routes ------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_a_created_route_is_listed_until_it_is_deleted(
        self, conformance: Conformance
    ) -> None:
        """Create, list (not a blackhole when its target runs; not under another cluster
        name), delete, gone. The target is an instance when the target can make one."""
        routes = conformance.routes
        routes()
        cluster = conformance.cluster_name
        with_instance = conformance.target.driver is not None and conformance.has_instances()
        target = await conformance.create_instance("rt") if with_instance else unique("rt")
        cidr = pod_cidr()
        listed = await self._create_route(conformance, target, cidr)
        try:
            assert not (with_instance and listed.blackhole), (
                f"the route to a running instance is a blackhole: {listed}"
            )
            elsewhere = await conformance.call(
                "ListRoutes", routes().list_routes(f"other-{uuid.uuid4().hex[:6]}")
            )
            assert not [r for r in elsewhere if r.destination_cidr == cidr], (
                f"list_routes of another cluster lists the route made for {cluster!r}"
            )
        finally:
            await conformance.call("DeleteRoute", routes().delete_route(cluster, listed))
        left = [
            r
            for r in await conformance.call("ListRoutes", routes().list_routes(cluster))
            if r.target_node == target and r.destination_cidr == cidr
        ]
        assert not left, f"the route is still listed after delete_route: {left}"

    @pytest.mark.asyncio
    async def test_a_route_whose_target_is_gone_is_listed_as_a_blackhole(
        self, conformance: Conformance
    ) -> None:
        routes = conformance.routes
        routes()
        conformance.require_instances()
        target = await conformance.create_instance("rt")
        listed = await self._create_route(conformance, target, pod_cidr())
        try:
            await conformance.make_blackhole(target)
            now = [
                r
                for r in await conformance.call(
                    "ListRoutes", routes().list_routes(conformance.cluster_name)
                )
                if r.target_node == target and r.destination_cidr == listed.destination_cidr
            ]
            assert now, "the route vanished with its target; list it with blackhole=True"
            assert all(r.blackhole for r in now), (
                f"the route to a deleted instance is not a blackhole: {now}; the route "
                "controller would never remove it"
            )
            listed = now[0]
        finally:
            await conformance.call(
                "DeleteRoute", routes().delete_route(conformance.cluster_name, listed)
            )

    @staticmethod
    async def _create_route(conformance: Conformance, target: str, cidr: str) -> Route:
        routes = conformance.routes
        routes()
        cluster = conformance.cluster_name
        await conformance.call(
            "CreateRoute",
            routes().create_route(
                cluster, str(uuid.uuid4()), Route(target_node=target, destination_cidr=cidr)
            ),
        )
        listed = [
            r
            for r in await conformance.call("ListRoutes", routes().list_routes(cluster))
            if r.target_node == target and r.destination_cidr == cidr
        ]
        assert len(listed) == 1, (
            f"list_routes lists the route just created {len(listed)} times "
            f"(target {target}, {cidr}): {listed}"
        )
        return listed[0]
