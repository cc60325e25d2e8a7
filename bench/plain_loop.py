"""The reference: a plain hand-written ResNet50 training loop, no harness, same settings as `caraml run`.

    python3 bench/plain_loop.py [--compile [--mode MODE] [--coordinate-descent]] [--fused-sgd] [--steps 100]
        [--warmup 15] [--batch 256]

bf16 autocast, channels_last, SGD with momentum (PyTorch's foreach kernels, or its fused one), two synthetic batches
on the GPU alternated, timed with one synchronisation at each end of the measured window. --coordinate-descent sets
inductor's own switch for the process (torch._inductor.config.coordinate_descent_tuning). Prints one JSON line.
Independent of caraml.
"""

import argparse
import json
import time


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--mode", default=None)
    parser.add_argument("--coordinate-descent", action="store_true")
    parser.add_argument("--fused-sgd", action="store_true")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args(argv)
    if args.coordinate_descent and not args.compile:
        parser.error("--coordinate-descent tunes what inductor compiles: give --compile too")
    return args


def training_step(args: argparse.Namespace):
    """step(i): one training step of ResNet50 on one of two synthetic batches on the GPU."""
    import torch
    import torchvision

    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    model = torchvision.models.resnet50().to(device, memory_format=torch.channels_last).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4,
                                **({"fused": True} if args.fused_sgd else {}))
    criterion = torch.nn.CrossEntropyLoss()
    if args.coordinate_descent:
        import torch._inductor.config

        torch._inductor.config.coordinate_descent_tuning = True
    if args.compile:
        model = torch.compile(model, mode=args.mode)
    batches = [(torch.randn(args.batch, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last),
                torch.randint(0, 1000, (args.batch,), device=device)) for _ in range(2)]

    def step(i):
        x, y = batches[i % 2]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def main(argv=None) -> None:
    import torch

    args = parse(argv)
    step = training_step(args)
    start = time.perf_counter()
    for i in range(args.warmup):
        step(i)
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(args.steps):
        step(i)
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    print(json.dumps({"compile": args.compile, "mode": args.mode, "coordinate_descent": args.coordinate_descent,
                      "fused_sgd": args.fused_sgd, "images_per_s": args.batch * args.steps / wall,
                      "steps": args.steps, "wall_s": wall, "warmup_s": warmup_s, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
