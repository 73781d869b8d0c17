"""``sitp.distributed.checkpoint``: torch.distributed.checkpoint's namespace; its
``state_dict`` module gathers and scatters the state of a ``fully_shard``-ed model
(chapter 7.4)."""
