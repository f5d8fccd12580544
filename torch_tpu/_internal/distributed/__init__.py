"""Distributed helpers kept where the published TorchTPU API puts them."""
