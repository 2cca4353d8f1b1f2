"""The stacked engine: the runs of a sweep that differ only in optimizer, hyper-parameters,
schedule or seed trained as one batched model, each exactly as it trains alone.

- `grouping`: which runs stack together (`stack_key`), and why a run cannot (`refusal`)
- `stack`: a stack's members and its training
- `mlp`: K MLPs as one model, forward and backward written out
- `functional`: K copies of any other model, through torch.func
- `update_rules`: the course's eight classes as one update for a slice of members, and which
  rule a member's optimizer takes
- `probes`: whether an optimizer may step views of a stack, and share one instance among seeds
- `member_optimizers`: each member's optimizer stepping its slice of the stacked tensors
- `cuda_graph`: a stack's step as one CUDA graph, where replaying it is exact
"""
