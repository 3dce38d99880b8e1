from typing import Callable, Dict, List, Optional, Tuple

import torch

from ._epk import Client, Lease, Shard

TP_PLAN: Dict[str, str]

class Attachment:
    model: torch.nn.Module
    client: Client
    model_name: str
    layout: str
    prefetch_depth: Optional[int]
    device: Optional[int]
    block_names: List[str]
    kept: List[Lease]
    shards: Dict[str, Shard]
    def memory(self) -> Dict[str, int]: ...
    def close(self) -> None: ...

def find_blocks(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]: ...
def attach(model: torch.nn.Module, client: Client, model_name: str, *, layout: str = "dense:bf16",
           prefetch: Optional[int] = None, device: Optional[int] = None,
           rename: Optional[Callable[[str], str]] = None, decode: str = "daemon",
           max_decoded_gb: Optional[float] = None, static: bool = False, rank: int = 0, world_size: int = 1,
           tp_plan: Optional[Dict[str, str]] = None, max_gpu_gb: Optional[float] = None) -> Attachment: ...
def tp_shard(name: str, rank: int, world_size: int, plan: Optional[Dict[str, str]] = None) -> Optional[Shard]: ...
def load(config_or_dir: object, client: Client, model_name: str, *, layout: str = "dense:bf16",
         prefetch: Optional[int] = None, device: Optional[int] = None, model_class: Optional[type] = None,
         rename: Optional[Callable[[str], str]] = None, decode: str = "daemon",
         max_decoded_gb: Optional[float] = None, static: bool = False, rank: int = 0, world_size: int = 1,
         tp_plan: Optional[Dict[str, str]] = None, max_gpu_gb: Optional[float] = None) -> torch.nn.Module: ...
