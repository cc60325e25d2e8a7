"""`caraml data info PREFIX`: what a Megatron .bin/.idx pair holds."""

from __future__ import annotations


def add_parser(group) -> None:
    info = group.add_parser("info", help="sequences, documents, tokens and dtype of a Megatron dataset",
                            description="Check a Megatron .idx (and its .bin, when there) and print what it holds.")
    info.add_argument("prefix", help="the dataset prefix (PREFIX.idx, PREFIX.bin); PREFIX.idx also works")
    info.set_defaults(func=run)


def run(args) -> int:
    from caraml.data.megatron import IndexedDataset, bin_path, idx_path, read_index, split_prefix

    prefix = split_prefix(args.prefix)
    for path in (idx_path(prefix), bin_path(prefix)):
        _regular_or_absent(path)
    index = read_index(idx_path(prefix))
    tokens = bin_path(prefix)
    if tokens.exists():
        IndexedDataset(prefix)  # checks that the .bin matches the index
        bin_line = f"{tokens} ({tokens.stat().st_size} bytes, matches the index)"
    else:
        bin_line = f"{tokens} is missing: only the index can be read"
    lengths = index.sequence_lengths
    print(f"prefix     {prefix}")
    print(f"format     MMIDIDX v1, tokens {index.dtype.name}")
    print(f"sequences  {index.sequences}")
    print(f"documents  {index.documents}")
    print(f"tokens     {index.tokens}")
    if index.sequences:
        print(f"lengths    {lengths.min()} to {lengths.max()} tokens per sequence")
    print(f"bin        {bin_line}")
    return 0


def _regular_or_absent(path) -> None:
    """A FIFO, device, socket or folder under a dataset's name is there but is no dataset file: said so (a FIFO is
    never opened: reading it would wait for a writer)."""
    import stat

    from caraml.errors import BadInput

    try:
        mode = path.stat().st_mode
    except OSError:
        return  # absent (or unreadable): read_index and IndexedDataset say which
    if not stat.S_ISREG(mode):
        kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"),
                 (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
        kind = next((name for test, name in kinds if test(mode)), "a special file")
        raise BadInput(f"{path} is not a regular file ({kind}); give the prefix of a Megatron .bin/.idx pair "
                       "of files (e.g. made by `caraml data prepare`)")
