"""``torch_tpu.api._device_module.DeviceModule``: the published API's class
form of ``torch.tpu``. Every attribute is the ``torch.tpu`` function of the
same name (``DeviceModule.device_count()``, ``DeviceModule.synchronize()``,
``DeviceModule._get_cache_stats()``, ...), looked up when used, so the two
never disagree."""


class _DeviceModuleMeta(type):
    def __getattr__(cls, name):
        from torch_tpu import device as _tpu
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return getattr(_tpu, name)
        except AttributeError:
            raise AttributeError(f"DeviceModule (torch.tpu) has no attribute '{name}'") from None

    def __dir__(cls):
        from torch_tpu import device as _tpu
        return sorted(set(type.__dir__(cls)) | {n for n in dir(_tpu) if not n.startswith("__")})


class DeviceModule(metaclass=_DeviceModuleMeta):
    """``torch.tpu`` as a class: not instantiated, its attributes are the
    module's functions."""

    def __new__(cls, *args, **kwargs):
        raise TypeError("DeviceModule is used through its class attributes "
                        "(DeviceModule.device_count(), ...), like torch.tpu")
