"""Build a small Qwen2-style model and its tokenizer for the shipped arithmetic task, locally.

The folder (config, safetensors, a one-token-per-character tokenizer with a chat template) loads
like any Hugging Face model folder, so `live.model.path` can point at it. A model straight from
random initialisation never writes `#### N` by chance, so it would get no reward at all; with
`--warm-start-steps N` it is first trained for N supervised steps on the train split's reference
responses (`extra_info.response`), the way RL usually starts from an instruct model, and RL then
has a format to build on and answers to improve. The script prints the greedy accuracy on the test
split (the built-in `final_number` reward) before and after the warm start, and the share of
train prompts a sample at temperature 1 gets right (what an RL run starts from).

    python tools/make_arithmetic_model.py --out runs/models/arithmetic
    python tools/make_arithmetic_model.py --out runs/models/arithmetic-warm --warm-start-steps 400
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from dynaresize.executor.engines.interface import GenerationRequest, SamplingParams
from dynaresize.executor.engines.sampler import KVCacheSampler, SamplerConfig
from dynaresize.executor.job.char_model import CharModelSpec, build_char_model, build_char_tokenizer
from dynaresize.executor.job.config import DataConfig, RewardConfig
from dynaresize.executor.job.dataset import PromptDataset, load_prompt_dataset
from dynaresize.executor.job.hf_folder import export_hf_folder
from dynaresize.executor.job.reward import RewardInput, load_reward

DATA_DIR = Path(__file__).resolve().parents[1] / "dynaresize" / "data" / "arithmetic"
MAX_RESPONSE_TOKENS = 12


def accuracy(model, tokenizer, dataset: PromptDataset, *, temperature: float = 0.0) -> float:
    """Share of prompts whose response (greedy at temperature 0, else one sample, as an RL run
    draws them) the `final_number` reward scores 1."""
    engine = KVCacheSampler(
        model, SamplerConfig(max_batch_size=len(dataset), max_seq_len=64, cuda_graphs=False)
    )
    requests = [GenerationRequest(p.index, 0, p.token_ids) for p in dataset.prompts]
    params = SamplingParams(
        temperature=temperature,
        max_new_tokens=MAX_RESPONSE_TOKENS,
        eos_token_id=tokenizer.eos_token_id,
    )
    reward = load_reward(RewardConfig(builtin="final_number"))
    results = engine.generate(requests, params, step=0).results
    total = 0.0
    for result in results:
        row = dataset[result.prompt_id].row
        text = tokenizer.decode(result.token_ids, skip_special_tokens=True)
        total += reward(RewardInput(row.data_source, text, row.ground_truth)).score
    return total / len(results)


def warm_start(model, tokenizer, dataset: PromptDataset, *, steps: int, batch_size: int, seed: int):
    """Supervised steps on (prompt, reference response): cross-entropy on the response tokens."""
    pairs = [
        (p.token_ids, tokenizer.encode(p.row.extra_info["response"], add_special_tokens=False))
        for p in dataset.prompts
    ]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(steps):
        rows = torch.randint(len(pairs), (batch_size,), generator=generator).tolist()
        input_ids, labels = _batch([pairs[i] for i in rows], tokenizer)
        loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == steps - 1:
            print(f"  warm start step {step}: loss {loss.item():.3f}")
    model.eval()


def _batch(pairs, tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids, and labels that are -100 outside the response (and its end token)."""
    rows = [(list(prompt), [*response, tokenizer.eos_token_id]) for prompt, response in pairs]
    width = max(len(p) + len(r) for p, r in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    for i, (prompt, response) in enumerate(rows):
        tokens = prompt + response
        input_ids[i, : len(tokens)] = torch.tensor(tokens)
        labels[i, len(prompt) : len(tokens)] = torch.tensor(response)
    return input_ids, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="new folder to write the model to")
    parser.add_argument("--model-type", choices=["qwen2", "llama"], default="qwen2")
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warm-start-steps", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    spec = CharModelSpec(
        model_type=args.model_type,
        hidden_size=args.hidden_size,
        intermediate_size=4 * args.hidden_size,
        num_layers=args.num_layers,
        init_seed=args.seed,
    )
    tokenizer = build_char_tokenizer(context_tokens=spec.context_tokens)
    model = build_char_model(spec, tokenizer)
    train, test = (
        load_prompt_dataset(DataConfig(train_files=[str(DATA_DIR / f"{s}.parquet")]), tokenizer)
        for s in ("train", "test")
    )
    print(f"test accuracy before (greedy): {accuracy(model, tokenizer, test):.3f}")
    if args.warm_start_steps:
        start = time.perf_counter()
        warm_start(
            model,
            tokenizer,
            train,
            steps=args.warm_start_steps,
            batch_size=args.batch_size,
            seed=args.seed,
        )
        print(f"warm start: {args.warm_start_steps} steps in {time.perf_counter() - start:.1f} s")
        print(f"test accuracy after (greedy): {accuracy(model, tokenizer, test):.3f}")
        torch.manual_seed(args.seed)
        sampled = accuracy(model, tokenizer, train, temperature=1.0)
        print(f"train accuracy after (one sample at temperature 1, as RL draws): {sampled:.3f}")
    print(f"wrote {export_hf_folder(model, tokenizer, args.out)}")


if __name__ == "__main__":
    main()
