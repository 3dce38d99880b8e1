from typing import Callable, List, Optional, Tuple

import torch

from ._epk import Client, Lease

class Attachment:
    model: torch.nn.Module
    client: Client
    model_name: str
    layout: str
    prefetch_depth: int
    device: Optional[int]
    block_names: List[str]
    kept: List[Lease]
    def close(self) -> None: ...

def find_blocks(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]: ...
def attach(model: torch.nn.Module, client: Client, model_name: str, *, layout: str = "dense:bf16",
           prefetch: int = 2, device: Optional[int] = None,
           rename: Optional[Callable[[str], str]] = None) -> Attachment: ...
def load(config_or_dir: object, client: Client, model_name: str, *, layout: str = "dense:bf16", prefetch: int = 2,
         device: Optional[int] = None, model_class: Optional[type] = None,
         rename: Optional[Callable[[str], str]] = None) -> torch.nn.Module: ...
