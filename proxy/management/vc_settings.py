"""AlterVirtualClusters' settings part (tagged `Configs`): a VC's own settings (proxy/tenancy/settings.py)
checked, authorized and turned into state records, sans-I/O. Refusals are per VC item."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..acl.model import Operation as Op
from ..errors import Refusal
from ..protocol import management as m
from ..tenancy import settings
from ..tenancy.model import KAFKA_CLUSTER, TenancyImage, setting_delete, setting_record
from ..tenancy.rights import Caller

Record = tuple[str, dict[str, Any] | None]


class SettingsRefused(Refusal):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def alter_settings(image: TenancyImage, caller: Caller, vc: str, configs: Any) -> list[Record]:
    """A VC's settings (proxy/tenancy/settings.py), all or none. Its admins may set its description and
    labels; what changes its reach or capacity is an operator's, so an admin never raises its own limits."""
    if not caller.may(Op.ALTER_VIRTUAL_CLUSTER, vc):
        raise SettingsRefused(ErrorCode.cluster_authorization_failed, "not authorized")
    if vc == KAFKA_CLUSTER:
        raise SettingsRefused(
            ErrorCode.invalid_request, f"{KAFKA_CLUSTER} is the physical cluster: it has no such settings"
        )
    if vc not in image.vcs:
        raise SettingsRefused(ErrorCode.resource_not_found, f"no virtual cluster {vc!r}")
    names = [config.name for config in configs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SettingsRefused(ErrorCode.invalid_request, f"{', '.join(twice)}: given twice")
    reach = sorted(set(names) & settings.OPERATOR_KEYS)  # authorized before any value is looked at
    if reach and not caller.operator:
        raise SettingsRefused(
            ErrorCode.cluster_authorization_failed,
            f"only holders of ALTER_VIRTUAL_CLUSTER on {KAFKA_CLUSTER} may change {', '.join(reach)}",
        )
    return [_record(vc, config) for config in configs]


def _record(vc: str, config: Any) -> Record:
    key = config.name
    try:
        op = m.ConfigOperation(int(config.config_operation))
    except ValueError:
        raise SettingsRefused(
            ErrorCode.invalid_request, f"{key}: unknown config operation {int(config.config_operation)}"
        ) from None
    try:
        if op is m.ConfigOperation.DELETE:
            if key not in settings.KEYS:
                settings.parse(key, "")  # the unknown key's refusal
            return setting_delete(vc, key)
        if config.value is None:
            raise settings.SettingError(key, "a value is needed (delete the setting to remove it)")
        return setting_record(vc, key, settings.parse(key, config.value))
    except settings.SettingError as exc:
        raise SettingsRefused(ErrorCode.invalid_config, str(exc)) from None
