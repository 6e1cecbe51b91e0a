"""A user's own job in the live run: a tiny Qwen2-style folder built here, chat prompts in veRL's
Parquet format and a reward file. In one process: prompts are rendered with the tokenizer's chat
template, both engines generate the same greedy tokens on the folder's model, and the rewards
reach the loss. On Ray (one module-scoped run of 4 steps with a resize each way, then two
resumes): the lineage holds, the exported folder loads and generates like the live policy, a
resume continues the dataset's order, and a reward that raises stops the run with one line and
the checkpoint intact.

Budget: about 40 s on 2 cores (three short runs share the session's Ray)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ray")

from transformers import AutoModelForCausalLM  # noqa: E402

from dynaresize.executor.batch import BATCHES_DIR, load_batch  # noqa: E402
from dynaresize.executor.config import LiveConfig  # noqa: E402
from dynaresize.executor.driver import run_live  # noqa: E402
from dynaresize.executor.engines.hf_engine import HFGenerateEngine  # noqa: E402
from dynaresize.executor.engines.interface import GenerationRequest, SamplingParams  # noqa: E402
from dynaresize.executor.engines.sampler import KVCacheSampler, SamplerConfig  # noqa: E402
from dynaresize.executor.job.char_model import write_char_model_folder  # noqa: E402
from dynaresize.executor.job.hf_folder import load_model_folder  # noqa: E402
from dynaresize.executor.job.live_job import prepare_prompt_source, replica_scorer, rollout_shape  # noqa: E402
from dynaresize.executor.job.reward import RewardFunctionError  # noqa: E402
from dynaresize.executor.rl.model import (  # noqa: E402
    count_parameters,
    flatten_parameters,
    load_flat_parameters,
)
from dynaresize.executor.run_folder import checkpoint as ckpt  # noqa: E402
from dynaresize.executor.run_folder.lineage import check_lineage  # noqa: E402
from dynaresize.executor.run_folder.records import read_lineage  # noqa: E402
from dynaresize.executor.worker.rollout import (  # noqa: E402
    RolloutRole,
    collect_batch,
    sampler_config,
    sampling_params,
)
from dynaresize.executor.worker.shards import ShardLayout  # noqa: E402
from dynaresize.executor.worker.trainer import TrainerRole  # noqa: E402
from dynaresize.traces.io import read_trace  # noqa: E402
from tests.job_files import verl_row, write_parquet  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Share of the response's characters that are digits: varies from the first step."""
    if not solution_str:
        return 0.0
    return {"score": sum(c.isdigit() for c in solution_str) / len(solution_str), "n": 1}
'''
CONSTANT_REWARD = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 0.5\n"
)
RAISING_REWARD = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
    "    raise KeyError('answer')\n"
)


@pytest.fixture(scope="module")
def job_files(tmp_path_factory) -> Path:
    """A model folder, 24 chat prompts with a system turn and ground truths, reward files."""
    root = tmp_path_factory.mktemp("job")
    write_char_model_folder(root / "model")
    rows = [
        verl_row(
            [
                {"role": "system", "content": "Answer with a number."},
                {"role": "user", "content": f"What is {a} + {a + 3}?"},
            ],
            answer=str(2 * a + 3),
            source="sums",
            index=f"sum-{a}",
        )
        for a in range(24)
    ]
    write_parquet(root / "train.parquet", rows)
    (root / "reward.py").write_text(REWARD)
    (root / "constant.py").write_text(CONSTANT_REWARD)
    (root / "raising.py").write_text(RAISING_REWARD)
    return root


def job_config(root: Path, **overrides) -> LiveConfig:
    fields = {
        "model": {"path": str(root / "model")},
        "data": {"train_files": [str(root / "train.parquet")], "max_prompt_tokens": 96},
        "reward": {"path": str(root / "reward.py")},
        "num_workers": 3,
        "initial_allocation": "2:1",
        "candidate_allocations": ["2:1", "1:2"],
        "num_steps": 4,
        "prompts_per_step": 4,
        "samples_per_prompt": 4,
        "max_response_tokens": 8,
        "micro_batch_samples": 16,
        "optimizer": {"lr": 1e-3},
        "policy": {"kind": "scheduled", "schedule": "1@1:2;2@2:1"},
        "checkpoint_every_steps": 1,
        "record_batches": True,
    }
    return LiveConfig.model_validate({**fields, **overrides})


# --- in one process ---------------------------------------------------------------------------


def test_chat_prompts_are_rendered_with_the_tokenizer_chat_template(job_files) -> None:
    live = job_config(job_files)
    tokenizer = load_model_folder(job_files / "model").tokenizer
    items = prepare_prompt_source(live).next_batch(0)
    assert [item.prompt_id for item in items] == [0, 1, 2, 3]
    for item in items:
        a = (int(item.ground_truth) - 3) // 2
        messages = [
            {"role": "system", "content": "Answer with a number."},
            {"role": "user", "content": f"What is {a} + {a + 3}?"},
        ]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert text.startswith("<|system|>") and text.endswith("<|assistant|>")
        assert item.prompt_token_ids == tuple(tokenizer.encode(text, add_special_tokens=False))
        assert item.data_source == "sums" and item.origin.startswith(str(job_files))


def test_the_folder_model_generates_the_same_greedy_tokens_in_both_engines(job_files) -> None:
    loaded = load_model_folder(job_files / "model")
    items = prepare_prompt_source(job_config(job_files)).next_batch(0)
    requests = [GenerationRequest(i.prompt_id, 0, i.prompt_token_ids) for i in items]
    params = SamplingParams(temperature=0.0, max_new_tokens=10, eos_token_id=None)
    own = KVCacheSampler(loaded.model, SamplerConfig(max_batch_size=4, max_seq_len=128))
    hf = HFGenerateEngine(loaded.model, pad_token_id=loaded.tokenizer.pad_token_id)
    by_engine = [
        {r.prompt_id: r.token_ids for r in engine.generate(requests, params, step=0).results}
        for engine in (own, hf)
    ]
    assert by_engine[0] == by_engine[1]
    assert all(len(tokens) == 10 for tokens in by_engine[0].values())


def _one_update(live: LiveConfig) -> tuple[list[float], torch.Tensor, torch.Tensor]:
    """One batch generated and scored as a replica does, one trainer step on it: the rewards,
    and the weights before and after."""
    rewards, before, after, _ = _update_with_batch(live)
    return rewards, before, after


def _update_with_batch(live: LiveConfig):
    model = load_model_folder(live.model.path).model
    shape = rollout_shape(live)
    replica = RolloutRole(
        worker_id=1,
        model=model,
        scorer=replica_scorer(live),
        sampler=sampler_config(live, shape),
        params=sampling_params(live, shape),
        samples_per_prompt=live.samples_per_prompt,
        weights_version=0,
    )
    items = prepare_prompt_source(live).next_batch(0)
    batch = collect_batch(
        0, {1: replica.generate(batch_id=0, items=items)}, objective=live.objective
    )
    trainer_model = load_model_folder(live.model.path).model.requires_grad_(True)
    trainer = TrainerRole(
        worker_id=0,
        model=trainer_model,
        device=torch.device("cpu"),
        settings=live.optimizer,
        objective=live.objective,
        micro_batch_samples=live.micro_batch_samples,
    )
    layout = ShardLayout(numel=count_parameters(trainer_model), num_ranks=1)
    trainer.bind(group=None, rank=0, layout=layout)
    before = flatten_parameters(trainer_model).clone()
    trainer.load_weights(before.float(), optimizer_step=0)
    trainer.load_moments({})
    trainer.train(batch.samples, num_batch_tokens=int(batch.response_lengths().sum()))
    rewards = [s.reward for s in batch.samples]
    return rewards, before, flatten_parameters(trainer_model), (batch, trainer_model)


def _response_logprobs(model, samples) -> torch.Tensor:
    from dynaresize.executor.rl.grpo import token_logprobs
    from dynaresize.executor.worker.objective import pack

    rows = pack(samples, device=torch.device("cpu"), pad_token_id=0)
    with torch.no_grad():
        return (token_logprobs(model, rows) * rows.response_mask).sum(dim=1)


def test_rewards_reach_the_loss(job_files) -> None:
    rewards, before, after = _one_update(job_config(job_files, optimizer={"lr": 1e-2}))
    assert len(set(rewards)) > 1  # the digit share differs between samples
    assert not torch.equal(before, after)
    # the same step with a reward that is the same for every sample: no advantage, no update
    constant = job_config(job_files, reward={"path": str(job_files / "constant.py")})
    rewards, before, after = _one_update(constant)
    assert set(rewards) == {0.5}
    assert torch.equal(before, after)


def test_the_update_favours_the_better_rewarded_responses(job_files) -> None:
    live = job_config(job_files, optimizer={"lr": 1e-2})
    *_, (batch, trained) = _update_with_batch(live)
    untrained = load_model_folder(live.model.path).model
    gain = _response_logprobs(trained, batch.samples) - _response_logprobs(untrained, batch.samples)
    advantages = torch.tensor([s.advantage for s in batch.samples])
    assert gain[advantages > 0].mean() > gain[advantages < 0].mean()


# --- on Ray -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def first_run(job_files, tmp_path_factory, _ray_started):
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1")
    out = tmp_path_factory.mktemp("run")
    export = out.parent / f"{out.name}-policy"
    config = job_config(job_files)
    result = run_live(config, out_dir=out, export_hf=export)
    saved = ckpt.load(out)
    return config, result, out, saved


@pytest.mark.live
def test_the_run_trains_on_the_dataset_with_resizes_and_a_sound_lineage(first_run) -> None:
    config, result, out, _ = first_run
    assert result.steps_completed == 4 and result.num_resizes == 2
    summary = check_lineage(out, config)
    assert summary.num_steps == 4 and summary.num_samples == 4 * 16
    source = prepare_prompt_source(config)
    for batch_id in range(4):
        batch = load_batch(out / BATCHES_DIR, batch_id)
        drawn = {i.prompt_id: i.prompt_token_ids for i in source.next_batch(batch_id)}
        assert {s.prompt_id: s.prompt_token_ids for s in batch.samples} == drawn
        assert any(s.reward > 0 for s in batch.samples)


@pytest.mark.live
def test_every_sample_names_its_dataset_row_in_the_trace_and_the_lineage(first_run) -> None:
    config, _, out, _ = first_run
    source = prepare_prompt_source(config)
    row_of = {}
    for batch_id in range(4):
        row_of.update({i.prompt_id: i.extra_info_index for i in source.next_batch(batch_id)})
    samples = read_trace(out / "trace").samples
    assert len(samples) == 4 * 16 and set(samples["data_source"]) == {"sums"}
    assert set(samples["extra_info_index"]) <= {f"sum-{a}" for a in range(24)}
    lineage = read_lineage(out)
    assert len(lineage) == 4 * 16
    assert all(r.data_source == "sums" for r in lineage)
    assert all(r.extra_info_index == row_of[r.prompt_id] for r in lineage)


@pytest.mark.live
def test_the_exported_folder_loads_and_generates_like_the_live_policy(first_run) -> None:
    config, result, _, saved = first_run
    exported = AutoModelForCausalLM.from_pretrained(result.exported_to, local_files_only=True)
    assert torch.equal(flatten_parameters(exported).float(), saved.vectors["master"])
    live_policy = load_model_folder(config.model.path).model
    load_flat_parameters(live_policy, saved.vectors["master"])
    items = prepare_prompt_source(config).next_batch(0)
    requests = [GenerationRequest(i.prompt_id, 0, i.prompt_token_ids) for i in items]
    params = SamplingParams(temperature=0.0, max_new_tokens=8, eos_token_id=None)
    own = KVCacheSampler(live_policy, SamplerConfig(max_batch_size=4, max_seq_len=128))
    expected = {r.prompt_id: r.token_ids for r in own.generate(requests, params, step=0).results}
    for item in items:
        ids = torch.tensor([item.prompt_token_ids])
        generated = exported.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=8,
            min_new_tokens=8,
            do_sample=False,
            pad_token_id=0,
        )
        assert generated[0, ids.shape[1] :].tolist() == list(expected[item.prompt_id])
    assert (Path(result.exported_to) / "tokenizer_config.json").is_file()


@pytest.mark.live
def test_a_resume_continues_the_dataset_order_and_a_raising_reward_stops_cleanly(
    first_run, job_files
) -> None:
    config, _, out, saved = first_run
    assert saved.prompt_source is not None and saved.prompt_source["next_batch_id"] == 4
    longer = config.model_copy(update={"num_steps": 6})
    result = run_live(longer, out_dir=out, resume=True)
    assert result.steps_completed == 6
    source = prepare_prompt_source(longer)
    for batch_id in range(6):
        drawn = {i.prompt_id: i.prompt_token_ids for i in source.next_batch(batch_id)}
        batch = load_batch(out / BATCHES_DIR, batch_id)
        assert {s.prompt_id: s.prompt_token_ids for s in batch.samples} == drawn
    # (a finished run has no pending batch: extended, it generates batch 4 with the final weights,
    # one version fresher than one_step_off's lineage rule expects, so the lineage is not checked)

    meta = (out / ckpt.CHECKPOINT_DIR / "meta.json").read_bytes()
    # the user's reward file now raises (a resume accepts the same run only: same reward path)
    reward_file = Path(longer.reward.path)
    original = reward_file.read_bytes()
    reward_file.write_bytes((job_files / "raising.py").read_bytes())
    try:
        with pytest.raises(RewardFunctionError) as caught:
            run_live(longer.model_copy(update={"num_steps": 7}), out_dir=out, resume=True)
    finally:
        reward_file.write_bytes(original)
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    assert "compute_score" in message and reward_file.name in message
    assert "KeyError" in message and "prompt 24 sample" in message
    assert (out / ckpt.CHECKPOINT_DIR / "meta.json").read_bytes() == meta
    assert json.loads(meta)["next_step"] == 6
