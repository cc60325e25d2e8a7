"""The workload kit: the parts every training workload needs, written once.

precision (autocast, gradient scaling, what a device can run, the precision MFU is taken against),
data_parallel (DDP), compile (torch.compile options), optim (kernel flags), flops (counting on the meta
device), epochs (CARAML's epoch loop, stoppable at every step), step (backward and optimizer step, through
the fp16 gradient scaler when there is one), loader_workers (DataLoader workers, started by a fork server).
Each module imports torch only inside its functions, so a workload's declaration can import the kit without
torch.
"""
