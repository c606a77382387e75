"""Who is where, and who may manage what: the trust model (docs/security.md#the-trust-model), sans-I/O.

* **Everyone is somewhere.** With tenancy on, a principal is in one virtual cluster, in `kafka-cluster`
  (the KIP's reserved VC: the physical cluster, names unchanged), or nowhere, and then it is refused at
  login. Being in `kafka-cluster` is a grant (the config's super-admins, or a principal added to it by
  someone holding ALTER_VIRTUAL_CLUSTER on `kafka-cluster`), never a default.
* **Client ids are labels.** A client chooses its own id, so a client-id binding places only principals
  that carry no stronger identity: not bound by name, not a super-admin, holding no right.
* **Rights are ACLs** (KIP-1134): the *_VIRTUAL_CLUSTER operations on CLUSTER resources in
  `kafka-cluster`'s own ACLs; a binding on `kafka-cluster` holds for every VC, one on a VC's name (or a
  prefix of it) for that VC. The config's super-admins hold every right (the bootstrap). A VC admin of
  older state (an `admin` record) holds ADMIN_OPERATIONS on that VC, as if granted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from ..acl.model import (
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclSet,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    judge,
)
from .model import KAFKA_CLUSTER, TenancyImage

Op = Operation
ANONYMOUS = "User:ANONYMOUS"
# What "an admin of the VC" holds (`admins` in a seed entry, ADMIN in AlterVirtualClusters): describe and
# alter the VC, see it listed, and be a super user inside it (its own ACLs).
ADMIN_OPERATIONS = (Op.ALTER_VIRTUAL_CLUSTER, Op.DESCRIBE_VIRTUAL_CLUSTER, Op.LIST_VIRTUAL_CLUSTERS)
# Which operation also grants another (Kafka's implied operations, for these rights): whoever may
# alter or delete a VC may describe it, and whoever may describe it sees it listed.
_GRANTED_BY: dict[Operation, frozenset[Operation]] = {
    Op.DESCRIBE_VIRTUAL_CLUSTER: frozenset({Op.ALTER_VIRTUAL_CLUSTER, Op.DELETE_VIRTUAL_CLUSTER}),
    Op.LIST_VIRTUAL_CLUSTERS: frozenset(
        {Op.DESCRIBE_VIRTUAL_CLUSTER, Op.ALTER_VIRTUAL_CLUSTER, Op.DELETE_VIRTUAL_CLUSTER}
    ),
}


def admin_bindings(vc: str, principal: str) -> list[AclBinding]:
    """The ACLs that make `principal` an admin of `vc` (kept in `kafka-cluster`'s ACLs)."""
    return [
        AclBinding(ResourceType.CLUSTER, vc, PatternType.LITERAL, principal, WILDCARD, op, Permission.ALLOW)
        for op in ADMIN_OPERATIONS
    ]


class Rights:
    """The trust model's decisions over one image and the config's super-admins."""

    def __init__(self, image: TenancyImage, super_admins: Iterable[str] = ()):
        self.image = image
        self.super_admins = frozenset(super_admins)

    # -- who is where -----------------------------------------------------------------------------------
    def placement(self, principal: str | None, client_id: str | None) -> str | None:
        """The VC a principal is in (KAFKA_CLUSTER for the physical cluster), or None: refused."""
        image = self.image
        if principal is not None and principal in self.super_admins:
            return KAFKA_CLUSTER
        name = image.principals.get(principal or "")
        if name is not None:
            if name == KAFKA_CLUSTER:
                return None if principal == ANONYMOUS else KAFKA_CLUSTER
            return name if name in image.vcs else None
        if principal is not None and self.holds_any(principal):
            return None  # an identity stronger than a label, bound nowhere: no client id places it
        name = image.client_ids.get(client_id or "")
        return name if name is not None and name in image.vcs else None

    def claims(self, principal: str) -> bool:
        """Whether the proxy places or empowers this principal itself (bound by name, a super-admin, a
        holder of rights): then it must log in with the proxy's credentials, never be relayed to the
        broker under that name."""
        return principal in self.super_admins or principal in self.image.principals or self.holds_any(principal)

    def in_kafka_cluster(self, principal: str | None) -> bool:
        if principal is None or principal == ANONYMOUS:
            return False
        return principal in self.super_admins or self.image.principals.get(principal) == KAFKA_CLUSTER

    def holds_any(self, principal: str) -> bool:
        """Whether a principal holds any right over VCs or physical names (an admin, an operator's tool)."""
        return principal in self.super_admins or principal in self.image.right_holders()

    # -- rights -----------------------------------------------------------------------------------------
    def is_super(self, principal: str | None) -> bool:
        return principal is not None and principal in self.super_admins

    def may(self, principal: str | None, op: Operation, vc: str, host: str = WILDCARD) -> bool:
        """May `principal` do `op` (a *_VIRTUAL_CLUSTER operation) on `vc` (a VC's name or KAFKA_CLUSTER)?"""
        if principal is None:
            return False
        if principal in self.super_admins:
            return True
        if principal == ANONYMOUS:
            return False  # nobody's identity: never holds a right, whatever a binding says
        legacy = self.image.vcs.get(vc)
        if legacy is not None and principal in legacy.admins and op in _legacy_ops():
            return True
        names = (vc,) if vc == KAFKA_CLUSTER else (vc, KAFKA_CLUSTER)
        return decide(self.image.cluster_acls, principal, host, op, ResourceType.CLUSTER, names, _GRANTED_BY)

    def vc_admin(self, principal: str | None, vc: str, host: str = WILDCARD) -> bool:
        """A super user inside `vc` (its own ACLs): whoever may alter it."""
        return self.may(principal, Op.ALTER_VIRTUAL_CLUSTER, vc, host)

    def cluster_operator(self, principal: str | None, host: str = WILDCARD) -> bool:
        """Holds the right over every VC (ALTER_VIRTUAL_CLUSTER on kafka-cluster): what bounds a whole VC
        (its quota cap, foreign topic links, assigned groups) is this principal's to set."""
        return self.may(principal, Op.ALTER_VIRTUAL_CLUSTER, KAFKA_CLUSTER, host)

    def holders(self, op: Operation, vc: str) -> set[str]:
        """The principals named in ALLOW bindings that give `op` on `vc` (and are not denied it), plus
        legacy admins, super-admins left out: for "never remove the last holder of a right"."""
        named = {b.principal for b in self.image.cluster_acls if b.permission is Permission.ALLOW}
        legacy = self.image.vcs.get(vc)
        if legacy is not None:
            named |= legacy.admins
        return {p for p in named if p != WILDCARD_PRINCIPAL and p not in self.super_admins and self.may(p, op, vc)}


def _legacy_ops() -> frozenset[Operation]:
    return frozenset(ADMIN_OPERATIONS)


def decide(
    acls: AclSet,
    principal: str,
    host: str,
    op: Operation,
    rtype: ResourceType,
    names: Iterable[str],
    granted_by: dict[Operation, frozenset[Operation]] | None = None,
) -> bool:
    """Kafka's rule over the bindings of several resource names at once: a matching DENY on any of them
    wins, else a matching ALLOW on any of them allows; nothing matching denies."""
    granting = {op, Op.ALL} | set((granted_by or {}).get(op, ()))
    candidates = (
        b
        for name in names
        for b in acls.candidates(rtype, name)
        # a prefix meant for VC names (e.g. "kafka") never reaches the whole cluster
        if not (name == KAFKA_CLUSTER and b.pattern is PatternType.PREFIXED)
    )
    return judge(candidates, principal, host, op, granting)[1]


@dataclass(frozen=True)
class Caller:
    """Who asks, from where, and the rights over the image the request is decided on (`on`)."""

    principal: str | None
    super_admins: frozenset[str] = frozenset()
    host: str = "*"
    image: TenancyImage | None = None

    def on(self, image: TenancyImage) -> Caller:
        return self if self.image is image else dataclasses.replace(self, image=image)

    @property
    def rights(self) -> Rights:
        return Rights(self.image if self.image is not None else TenancyImage(), self.super_admins)

    @property
    def super_admin(self) -> bool:
        return self.principal is not None and self.principal in self.super_admins

    def may(self, op: Operation, vc: str) -> bool:
        return self.rights.may(self.principal, op, vc, self.host)

    @property
    def operator(self) -> bool:
        """Holds ALTER_VIRTUAL_CLUSTER on kafka-cluster: may reach beyond one VC."""
        return self.rights.cluster_operator(self.principal, self.host)

    def acl_admin(self, op: Operation = Op.ALTER) -> bool:
        """May manage kafka-cluster's own ACLs: Kafka's rule, ALTER (DESCRIBE to read) on the cluster."""
        if self.super_admin:
            return True
        if self.principal is None or self.principal == ANONYMOUS:
            return False
        implied = {Op.DESCRIBE: frozenset({Op.ALTER})}  # as in Kafka: who may alter ACLs may read them
        return decide(
            self.rights.image.cluster_acls, self.principal, self.host, op, ResourceType.CLUSTER, [CLUSTER_NAME], implied
        )
