"""hygiene: account-level risks the API can show.

Intent: a registered SSH "public key" that is not a key (a file path pasted in), an instance
exposing Jupyter or HTTP ports to the internet, or auto-pay defeating a prepaid cap. Notifies only.

```toml
[rules.hygiene]
check_ssh_keys = true
check_public_ports = true
risky_ports = [8888, 8080, 6006, 80]
check_autopay = true
```
"""

from __future__ import annotations

from pydantic import Field

from watchdog_gpu.rules.base import RuleConfig


class HygieneConfig(RuleConfig):
    check_ssh_keys: bool = Field(default=True, description="flag registered keys that are not keys")
    check_public_ports: bool = Field(
        default=True, description="flag instances publishing risky ports"
    )
    risky_ports: list[int] = Field(
        default_factory=lambda: [8888, 8080, 6006, 80],
        description="ports that should not face the internet (Jupyter, TensorBoard, HTTP)",
    )
    check_autopay: bool = Field(
        default=True, description="flag auto-pay that defeats a prepaid balance cap"
    )
