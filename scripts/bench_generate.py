"""Speed of greedy decoding with and without the key/value cache (tscratch.seq2seq).

Times `greedy_search` generating exactly `--new-tokens` tokens (no token ends a row) for a batch
of random right-padded sources on a randomly initialised `TransformerSeq2Seq`, with
`use_cache=True` and `use_cache=False`, repetitions interleaved, and prints the median of each
and the speed-up. Both runs must produce the same tokens, or the script fails. Without the cache
step t runs the decoder over all t tokens of the prefix; with it, over the newest one only.

Usage:
    OMP_NUM_THREADS=1 python scripts/bench_generate.py                 # d_model 256, 64 tokens
    OMP_NUM_THREADS=1 python scripts/bench_generate.py --new-tokens 128 --batch-size 1
    python scripts/bench_generate.py --smoke                           # seconds, tiny model
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tscratch.seq2seq import Seq2SeqConfig, TransformerSeq2Seq, greedy_search


def bench_generate(
    config: Seq2SeqConfig,
    *,
    batch_size: int = 8,
    source_length: int = 128,
    new_tokens: int = 64,
    reps: int = 3,
    seed: int = 0,
) -> dict[str, float]:
    """Median seconds of greedy decoding without and with the cache, and their ratio."""
    torch.manual_seed(seed)
    model = TransformerSeq2Seq(config).eval()
    lengths = torch.randint(source_length // 2, source_length + 1, (batch_size,))
    mask = torch.arange(source_length)[None, :] < lengths[:, None]
    ids = torch.randint(3, config.vocab_size, (batch_size, source_length)).masked_fill(~mask, 0)
    # eos_id -1 matches no token: every row generates all `new_tokens`
    options = dict(bos_id=1, eos_id=-1, max_new_tokens=new_tokens)
    times: dict[bool, list[float]] = {False: [], True: []}
    outputs = {}
    for _ in range(reps):
        for use_cache in (False, True):
            start = time.perf_counter()
            outputs[use_cache] = greedy_search(model, ids, mask, **options, use_cache=use_cache)
            times[use_cache].append(time.perf_counter() - start)
    if not torch.equal(outputs[False].sequences, outputs[True].sequences):
        raise RuntimeError("cached and uncached decoding produced different tokens")
    no_cache, cache = statistics.median(times[False]), statistics.median(times[True])
    return {"no_cache_s": no_cache, "cache_s": cache, "speedup": no_cache / cache}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--num-heads", type=int, default=8)
    parser.add_argument("--layers", type=int, default=3, help="encoder and decoder blocks each")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--source-length", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="a tiny model, 8 tokens, 1 rep")
    args = parser.parse_args(argv)
    if args.smoke:
        args.d_model, args.num_heads, args.layers, args.vocab_size = 16, 2, 1, 50
        args.batch_size, args.source_length, args.new_tokens, args.reps = 2, 8, 8, 1
    config = Seq2SeqConfig(
        vocab_size=args.vocab_size,
        d_model=args.d_model,
        num_heads=args.num_heads,
        d_ff=4 * args.d_model,
        num_layers=args.layers,
        max_len=max(args.source_length, args.new_tokens),
        dropout=0.0,
    )
    result = bench_generate(
        config,
        batch_size=args.batch_size,
        source_length=args.source_length,
        new_tokens=args.new_tokens,
        reps=args.reps,
    )
    print(
        f"greedy, {args.new_tokens} new tokens, batch {args.batch_size}, source length "
        f"{args.source_length}, d_model {args.d_model}, {args.layers}+{args.layers} layers, "
        f"vocab {args.vocab_size}, fp32, {torch.get_num_threads()} thread(s), median of "
        f"{args.reps}: no cache {result['no_cache_s']:.3f} s, cache {result['cache_s']:.3f} s, "
        f"speed-up {result['speedup']:.2f}x"
    )
    return result


if __name__ == "__main__":
    main()
