"""The checks, one package each, in the order a run takes them: preflight, gpu, nccl, ddp, fsdp, storage, soak.

Each package holds what its check measures on every rank and how it judges that (through contract/rules.py).
A check may import contract/, report/, runtime/ and another check's package (fsdp and storage reuse ddp's
training loop); never the run (run.py, local.py) above it, never the operator. torch is imported inside
functions only.
"""
