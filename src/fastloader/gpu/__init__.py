"""The device side: the copy step (DeviceStep), the CPU target's planar output buffers, and
batched augmentation ops that run on the output device."""
