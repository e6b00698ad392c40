"""A thin ctypes binding of the Level Zero loader (libze_loader.so.1), for what dpctl does not expose:
immutable command lists built once and executed per epoch, kernel timestamps, and IPC memory handles.

Only the structs and entry points the driver uses are bound. Their layouts follow ze_api.h (v1.x);
tests/test_level_zero_ze.py compiles a C program against the installed headers and checks every
size and offset here against it.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, byref, c_char, c_char_p, c_int, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p

from ...errors import BuildError, DriverUnavailable

LOADER = "libze_loader.so.1"

# enums and flags (ze_api.h)
#: Every ze_result_t of ze_api.h by name (tests/test_level_zero_ze.py checks it against the header).
RESULT_NAMES = {code: name for name, code in (
    ("ZE_RESULT_SUCCESS", 0x00000000), ("ZE_RESULT_NOT_READY", 0x00000001),
    ("ZE_RESULT_ERROR_DEVICE_LOST", 0x70000001), ("ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY", 0x70000002),
    ("ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY", 0x70000003), ("ZE_RESULT_ERROR_MODULE_BUILD_FAILURE", 0x70000004),
    ("ZE_RESULT_ERROR_MODULE_LINK_FAILURE", 0x70000005), ("ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET", 0x70000006),
    ("ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE", 0x70000007),
    ("ZE_RESULT_EXP_ERROR_DEVICE_IS_NOT_VERTEX", 0x7ff00001),
    ("ZE_RESULT_EXP_ERROR_VERTEX_IS_NOT_DEVICE", 0x7ff00002), ("ZE_RESULT_EXP_ERROR_REMOTE_DEVICE", 0x7ff00003),
    ("ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS", 0x70010000), ("ZE_RESULT_ERROR_NOT_AVAILABLE", 0x70010001),
    ("ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE", 0x70020000), ("ZE_RESULT_WARNING_DROPPED_DATA", 0x70020001),
    ("ZE_RESULT_ERROR_UNINITIALIZED", 0x78000001), ("ZE_RESULT_ERROR_UNSUPPORTED_VERSION", 0x78000002),
    ("ZE_RESULT_ERROR_UNSUPPORTED_FEATURE", 0x78000003), ("ZE_RESULT_ERROR_INVALID_ARGUMENT", 0x78000004),
    ("ZE_RESULT_ERROR_INVALID_NULL_HANDLE", 0x78000005), ("ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE", 0x78000006),
    ("ZE_RESULT_ERROR_INVALID_NULL_POINTER", 0x78000007), ("ZE_RESULT_ERROR_INVALID_SIZE", 0x78000008),
    ("ZE_RESULT_ERROR_UNSUPPORTED_SIZE", 0x78000009), ("ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT", 0x7800000a),
    ("ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT", 0x7800000b),
    ("ZE_RESULT_ERROR_INVALID_ENUMERATION", 0x7800000c), ("ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION", 0x7800000d),
    ("ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT", 0x7800000e), ("ZE_RESULT_ERROR_INVALID_NATIVE_BINARY", 0x7800000f),
    ("ZE_RESULT_ERROR_INVALID_GLOBAL_NAME", 0x78000010), ("ZE_RESULT_ERROR_INVALID_KERNEL_NAME", 0x78000011),
    ("ZE_RESULT_ERROR_INVALID_FUNCTION_NAME", 0x78000012),
    ("ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION", 0x78000013),
    ("ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION", 0x78000014),
    ("ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX", 0x78000015),
    ("ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE", 0x78000016),
    ("ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE", 0x78000017),
    ("ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED", 0x78000018),
    ("ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE", 0x78000019), ("ZE_RESULT_ERROR_OVERLAPPING_REGIONS", 0x7800001a),
    ("ZE_RESULT_WARNING_ACTION_REQUIRED", 0x7800001b), ("ZE_RESULT_ERROR_UNKNOWN", 0x7ffffffe),
)}
RESULT_NOT_READY = 0x00000001
INIT_FLAG_GPU_ONLY = 1
STYPE_DRIVER_PROPERTIES = 0x1
STYPE_DEVICE_PROPERTIES = 0x3
STYPE_CONTEXT_DESC = 0xD
STYPE_COMMAND_QUEUE_DESC = 0xE
STYPE_COMMAND_LIST_DESC = 0xF
STYPE_EVENT_POOL_DESC = 0x10
STYPE_EVENT_DESC = 0x11
STYPE_DEVICE_MEM_ALLOC_DESC = 0x15
STYPE_MODULE_DESC = 0x1B
STYPE_KERNEL_DESC = 0x1D
DEVICE_TYPE_GPU = 1
COMMAND_QUEUE_MODE_ASYNCHRONOUS = 2
EVENT_POOL_FLAG_HOST_VISIBLE = 1
EVENT_POOL_FLAG_KERNEL_TIMESTAMP = 4
EVENT_SCOPE_FLAG_HOST = 4
MODULE_FORMAT_IL_SPIRV = 0
MAX_DEVICE_NAME = 256
MAX_IPC_HANDLE_SIZE = 64
UINT64_MAX = (1 << 64) - 1

handle = c_void_p


class DriverUuid(Structure):
    _fields_ = [("id", c_uint8 * 16)]


class DeviceUuid(Structure):
    _fields_ = [("id", c_uint8 * 16)]


class DriverProperties(Structure):
    _fields_ = [("stype", c_int), ("pNext", c_void_p), ("uuid", DriverUuid), ("driverVersion", c_uint32)]


class DeviceProperties(Structure):
    _fields_ = [("stype", c_int), ("pNext", c_void_p), ("type", c_int), ("vendorId", c_uint32),
                ("deviceId", c_uint32), ("flags", c_uint32), ("subdeviceId", c_uint32),
                ("coreClockRate", c_uint32), ("maxMemAllocSize", c_uint64), ("maxHardwareContexts", c_uint32),
                ("maxCommandQueuePriority", c_uint32), ("numThreadsPerEU", c_uint32),
                ("physicalEUSimdWidth", c_uint32), ("numEUsPerSubslice", c_uint32),
                ("numSubslicesPerSlice", c_uint32), ("numSlices", c_uint32), ("timerResolution", c_uint64),
                ("timestampValidBits", c_uint32), ("kernelTimestampValidBits", c_uint32),
                ("uuid", DeviceUuid), ("name", c_char * MAX_DEVICE_NAME)]


class ContextDesc(Structure):
    _fields_ = [("stype", c_int), ("pNext", c_void_p), ("flags", c_uint32)]


class CommandQueueDesc(Structure):
    _fields_ = [("stype", c_int), ("pNext", c_void_p), ("ordinal", c_uint32), ("index", c_uint32),
                ("flags", c_uint32), ("mode", c_int), ("priority", c_int)]


class CommandListDesc(Structure):
    _fields_ = [("stype", c_int), ("pNext", c_void_p), ("commandQueueGroupOrdinal", c_uint32), ("flags", c_uint32)]


class ModuleDesc(Structure):
    _fields_ = [("stype", c_int), ("pNext", c_void_p), ("format", c_int), ("inputSize", c_size_t),
                ("pInputModule", c_void_p), ("pBuildFlags", c_char_p), ("pConstants", c_void_p)]


class KernelDesc(Structure):
    _fields_ = [("stype", c_int), ("pNext", c_void_p), ("flags", c_uint32), ("pKernelName", c_char_p)]


class GroupCount(Structure):
    _fields_ = [("groupCountX", c_uint32), ("groupCountY", c_uint32), ("groupCountZ", c_uint32)]


class IpcMemHandle(Structure):
    _fields_ = [("data", c_char * MAX_IPC_HANDLE_SIZE)]


class DeviceMemAllocDesc(Structure):
    _fields_ = [("stype", c_int), ("pNext", c_void_p), ("flags", c_uint32), ("ordinal", c_uint32)]


class EventPoolDesc(Structure):
    _fields_ = [("stype", c_int), ("pNext", c_void_p), ("flags", c_uint32), ("count", c_uint32)]


class EventDesc(Structure):
    _fields_ = [("stype", c_int), ("pNext", c_void_p), ("index", c_uint32), ("signal", c_uint32),
                ("wait", c_uint32)]


class KernelTimestampData(Structure):
    _fields_ = [("kernelStart", c_uint64), ("kernelEnd", c_uint64)]


class KernelTimestampResult(Structure):
    _fields_ = [("global_", KernelTimestampData), ("context", KernelTimestampData)]


#: C name -> ctypes struct, with C field name -> ctypes field name where they differ.
STRUCTS = {"ze_driver_uuid_t": DriverUuid, "ze_device_uuid_t": DeviceUuid,
           "ze_driver_properties_t": DriverProperties, "ze_device_properties_t": DeviceProperties,
           "ze_context_desc_t": ContextDesc, "ze_command_queue_desc_t": CommandQueueDesc,
           "ze_command_list_desc_t": CommandListDesc, "ze_module_desc_t": ModuleDesc,
           "ze_kernel_desc_t": KernelDesc, "ze_group_count_t": GroupCount, "ze_ipc_mem_handle_t": IpcMemHandle,
           "ze_device_mem_alloc_desc_t": DeviceMemAllocDesc, "ze_event_pool_desc_t": EventPoolDesc,
           "ze_event_desc_t": EventDesc, "ze_kernel_timestamp_data_t": KernelTimestampData,
           "ze_kernel_timestamp_result_t": KernelTimestampResult}
FIELD_ALIASES = {("ze_kernel_timestamp_result_t", "global"): "global_"}

P = POINTER
#: entry point -> argument types (all return ze_result_t).
SIGNATURES = {
    "zeInit": [c_uint32],
    "zeDriverGet": [P(c_uint32), P(handle)],
    "zeDriverGetProperties": [handle, P(DriverProperties)],
    "zeDeviceGet": [handle, P(c_uint32), P(handle)],
    "zeDeviceGetProperties": [handle, P(DeviceProperties)],
    "zeContextCreate": [handle, P(ContextDesc), P(handle)],
    "zeContextDestroy": [handle],
    "zeCommandQueueCreate": [handle, handle, P(CommandQueueDesc), P(handle)],
    "zeCommandQueueDestroy": [handle],
    "zeCommandQueueExecuteCommandLists": [handle, c_uint32, P(handle), handle],
    "zeCommandQueueSynchronize": [handle, c_uint64],
    "zeCommandListCreate": [handle, handle, P(CommandListDesc), P(handle)],
    "zeCommandListDestroy": [handle],
    "zeCommandListClose": [handle],
    "zeCommandListAppendLaunchKernel": [handle, handle, P(GroupCount), handle, c_uint32, P(handle)],
    "zeCommandListAppendEventReset": [handle, handle],
    "zeCommandListAppendBarrier": [handle, handle, c_uint32, P(handle)],
    "zeModuleCreate": [handle, handle, P(ModuleDesc), P(handle), P(handle)],
    "zeModuleDestroy": [handle],
    "zeModuleBuildLogGetString": [handle, P(c_size_t), c_char_p],
    "zeModuleBuildLogDestroy": [handle],
    "zeKernelCreate": [handle, P(KernelDesc), P(handle)],
    "zeKernelDestroy": [handle],
    "zeKernelSetGroupSize": [handle, c_uint32, c_uint32, c_uint32],
    "zeKernelSetArgumentValue": [handle, c_uint32, c_size_t, c_void_p],
    "zeEventPoolCreate": [handle, P(EventPoolDesc), c_uint32, P(handle), P(handle)],
    "zeEventPoolDestroy": [handle],
    "zeEventCreate": [handle, P(EventDesc), P(handle)],
    "zeEventDestroy": [handle],
    "zeEventQueryKernelTimestamp": [handle, P(KernelTimestampResult)],
    "zeMemAllocDevice": [handle, P(DeviceMemAllocDesc), c_size_t, c_size_t, handle, P(c_void_p)],
    "zeMemFree": [handle, c_void_p],
    "zeMemGetIpcHandle": [handle, c_void_p, P(IpcMemHandle)],
    "zeMemOpenIpcHandle": [handle, handle, IpcMemHandle, c_uint32, P(c_void_p)],
    "zeMemCloseIpcHandle": [handle, c_void_p],
}


class ZeError(BuildError):
    """A Level Zero call failed on a loader that is present (exit 4); the message names the call and
    the result code. An absent loader, driver or GPU is DriverUnavailable (exit 3) instead."""


def result_name(code: int) -> str:
    return RESULT_NAMES.get(code, f"0x{code:08x}")


class Loader:
    """The loaded libze_loader with typed, checked entry points: `ze.zeInit(0)` raises ZeError."""

    def __init__(self, path: str = LOADER):
        try:
            self.lib = ctypes.CDLL(path)
        except OSError:
            raise DriverUnavailable(f"Level Zero loader {path} not found (Debian: apt-get install libze1)") from None
        for name, argtypes in SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.argtypes, fn.restype = argtypes, c_uint32

    def synchronize(self, queue) -> bool:
        """zeCommandQueueSynchronize without waiting: True when the queue is idle, False while it runs
        (ZE_RESULT_NOT_READY); raises ZeError otherwise. drivers.base.wait_until polls it."""
        code = self.lib.zeCommandQueueSynchronize(queue, 0)
        if code == RESULT_NOT_READY:
            return False
        if code != 0:
            raise ZeError(f"Level Zero zeCommandQueueSynchronize returned {result_name(code)}")
        return True

    def __getattr__(self, name):
        if name not in SIGNATURES:
            raise AttributeError(name)
        fn = getattr(self.lib, name)

        def checked(*args):
            code = fn(*args)
            if code != 0:
                raise ZeError(f"Level Zero {name} returned {result_name(code)}")
            return code
        return checked


def drivers(ze: Loader) -> list:
    count = c_uint32(0)
    ze.zeDriverGet(byref(count), None)
    hs = (handle * count.value)()
    if count.value:
        ze.zeDriverGet(byref(count), hs)
    return list(hs)


def devices(ze: Loader, driver) -> list:
    count = c_uint32(0)
    ze.zeDeviceGet(driver, byref(count), None)
    hs = (handle * count.value)()
    if count.value:
        ze.zeDeviceGet(driver, byref(count), hs)
    return list(hs)


def device_properties(ze: Loader, device) -> DeviceProperties:
    props = DeviceProperties(stype=STYPE_DEVICE_PROPERTIES)
    ze.zeDeviceGetProperties(device, byref(props))
    return props


def require_driver(path: str = LOADER) -> Loader:
    """Load and initialize Level Zero for GPUs; DriverUnavailable (one line) when there is no
    loader, no driver, or no GPU."""
    ze = Loader(path)
    code = ze.lib.zeInit(INIT_FLAG_GPU_ONLY)
    if code != 0:
        raise DriverUnavailable(f"Level Zero has no GPU driver on this machine (zeInit returned {result_name(code)})")
    gpus = [d for drv in drivers(ze) for d in devices(ze, drv) if device_properties(ze, d).type == DEVICE_TYPE_GPU]
    if not gpus:
        raise DriverUnavailable("Level Zero found a driver but no GPU device")
    return ze


# --- IPC: one process per GPU shares its buffers with its peers by handle --------------------------
def ipc_export(ze: Loader, context, ptr: int) -> bytes:
    """The opaque 64-byte handle of a device allocation, to send to a peer rank's process."""
    h = IpcMemHandle()
    ze.zeMemGetIpcHandle(context, c_void_p(ptr), byref(h))
    return bytes(h)  # all 64 bytes (h.data would stop at the first zero byte)


def ipc_open(ze: Loader, context, device, blob: bytes) -> int:
    """Map a peer's allocation from its handle; returns the address in this process."""
    if len(blob) != MAX_IPC_HANDLE_SIZE:
        raise ValueError(f"an IPC handle is {MAX_IPC_HANDLE_SIZE} bytes, not {len(blob)}")
    h = IpcMemHandle()
    ctypes.memmove(ctypes.addressof(h), blob, MAX_IPC_HANDLE_SIZE)  # into the struct, not a copy of it
    ptr = c_void_p()
    ze.zeMemOpenIpcHandle(context, device, h, 0, byref(ptr))
    if not ptr.value:
        raise ZeError("Level Zero zeMemOpenIpcHandle returned success but no address")
    return ptr.value


def ipc_close(ze: Loader, context, ptr: int) -> None:
    ze.zeMemCloseIpcHandle(context, c_void_p(ptr))
