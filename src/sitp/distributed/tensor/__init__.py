"""``sitp.distributed.tensor``: torch.distributed.tensor's namespace. sitp has no DTensor;
its ``parallel`` module shards ``Linear`` layers for tensor parallelism (chapter 7.5)."""
