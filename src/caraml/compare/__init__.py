"""The comparison scripts' shared parts (bench/): points and groups run under a time budget with a table of
their results, the device's peak rate from the system profiles, and the pure analyses the scripts' tests pin.
Nothing here imports torch at import time."""
