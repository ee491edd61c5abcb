"""The checks, one package each, in the order a run takes them: preflight, gpu, nccl, ddp, fsdp, storage, soak.

Each package holds what its check measures on every rank, how it judges that (through contract/rules.py) and
its parts of the text, HTML and JUnit reports (parts.py: report/parts.ReportParts, walked by writers/).
A check may import contract/, report/, runtime/ and another check's package (fsdp and storage reuse ddp's
training loop); never the run (run.py, local.py) above it, never the operator. torch is imported inside
functions only.
"""
