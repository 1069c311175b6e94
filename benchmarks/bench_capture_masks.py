"""What leaving the padding out of sequence reductions costs: a padded BERT batch captured with its mask and without.

    .venv/bin/python benchmarks/bench_capture_masks.py            # 256 sequences of up to 128 tokens, best of 3
    .venv/bin/python benchmarks/bench_capture_masks.py --quick    # 64 sequences, best of 2

A BERT of 4 layers, 256 wide (random weights from a config, no download) over right-padded sequences of
16..128 tokens, capturing the embeddings and the 4 encoder layers (sequence layers of 128 steps, mean over
the steps) into a float16 store. The two captures alternate, so that load from other processes falls on
both, and it prints the best time of each and masked / unmasked (target <= 1.05).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import torch

from activis import capture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    n, repeats, steps = (64, 2, 128) if args.quick else (256, 3, 128)
    config = transformers.BertConfig(vocab_size=1000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                     intermediate_size=1024, max_position_embeddings=steps, num_labels=2)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).eval()
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(16, steps + 1, (n,), generator=g)
    ids = torch.randint(1, 1000, (n, steps), generator=g)
    mask = (torch.arange(steps)[None] < lengths[:, None]).long()
    items = [{"input_ids": ids[i] * mask[i], "attention_mask": mask[i]} for i in range(n)]
    layers = ["bert.embeddings"] + [f"bert.encoder.layer.{i}" for i in range(4)]
    root = tempfile.mkdtemp(prefix="bench-masks-")
    best = {"masked": float("inf"), "unmasked": float("inf")}
    try:
        for _ in range(repeats):
            for name, given in (("masked", None), ("unmasked", False)):
                start = time.perf_counter()
                capture(model, items, f"{root}/{name}", layers=layers, batch_size=32, sequence_mask=given,
                        overwrite=True, progress=False)
                best[name] = min(best[name], time.perf_counter() - start)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{n} sequences of {steps} steps ({float(mask.float().mean()):.0%} real), {len(layers)} sequence layers, "
          f"{args.threads} thread(s), best of {repeats}:")
    print(f"  with the mask     {best['masked']:.3f} s")
    print(f"  without (pads in) {best['unmasked']:.3f} s")
    print(f"  masked / unmasked {best['masked'] / best['unmasked']:.3f}  (target <= 1.05)")


if __name__ == "__main__":
    main()
