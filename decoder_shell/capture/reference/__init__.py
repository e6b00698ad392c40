"""The reference service: a small `transformers` DeepSeek-V4 split over R torch.distributed ranks."""
