"""Bounded host staging: move tensors between processes through a fixed pool of host buffers.

A resize moves weights and optimizer state from the ranks that hold them to the ranks that will.
Going through disk is slow and taking a full host copy of the state can exhaust host memory, so
state streams chunk by chunk through a small ring of shared-memory buffers owned by the receiving
process (`StagingPool`): the sender copies chunk i+1 out of its device while the receiver copies
chunk i into its device (on CUDA each side's copies run on their own stream and are tracked with
events; the buffers are page-locked so both copies are DMA transfers). At no time does either
process hold more than `num_buffers * chunk_bytes` of staged bytes.

Flow control is a pair of named pipes (FIFOs) beside the shared-memory segment: the sender writes
"chunk i is ready" after the bytes are in the buffer; the receiver writes "slot free" after it has
copied them out. Both sides block in the kernel and give up after `peer_timeout_s` with
a `StagingError` naming the transfer, so a dead peer cannot hang a resize forever.

Both sides derive the same chunk plan from the tensors' names, shapes and dtypes; the sender puts a
digest of that list in the segment's header and the receiver refuses a transfer whose layout differs
from its destination's, so bytes can never land in the wrong tensor.

By job: `config` (pool size, peer timeout, the error), `plan` (the chunk plan and its digest),
`ring` (the shared-memory segment and its pipes), `transfer` (`StagingPool`, `StagingSender`).

It imports torch and nothing else of the project: any worker side can stage through it.
"""

from .config import MIB, StagingConfig, StagingError
from .plan import Chunk, Segment, TensorSpec, layout_digest, plan_chunks, specs_of
from .ring import sweep_stale_pools
from .transfer import StagingPool, StagingSender, TransferStats

__all__ = [
    "MIB",
    "Chunk",
    "Segment",
    "StagingConfig",
    "StagingError",
    "StagingPool",
    "StagingSender",
    "TensorSpec",
    "TransferStats",
    "layout_digest",
    "plan_chunks",
    "specs_of",
    "sweep_stale_pools",
]
