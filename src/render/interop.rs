//! Display frames from the solver's GPU memory: the CUDA solver exports the
//! texels of each frame ([`SharedFrame`]), Vulkan imports that memory as a
//! buffer, and the frame reaches its 3D texture by a copy within the GPU. The
//! host path (interleave, then upload over the bus) costs the GPU a copy of
//! 256 MiB per frame at 256³, time the solver's context cannot use.

use std::os::fd::{AsFd, FromRawFd, IntoRawFd, OwnedFd};

use ash::vk;
use wgpu::hal::api::Vulkan;

use super::gpu::Gpu;
use crate::solver::display::SharedFrame;

const HANDLE: vk::ExternalMemoryHandleTypeFlags = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;

/// The device's UUID if it can import display frames: a Vulkan device with
/// `VK_KHR_external_memory_fd`.
pub fn device_uuid(gpu: &Gpu) -> Option<[u8; 16]> {
    // SAFETY: only queries; nothing is created or destroyed.
    unsafe {
        let hal = gpu.device.as_hal::<Vulkan>()?;
        if !hal
            .enabled_device_extensions()
            .contains(&ash::khr::external_memory_fd::NAME)
        {
            return None;
        }
        let mut id = vk::PhysicalDeviceIDProperties::default();
        let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut id);
        hal.shared_instance()
            .raw_instance()
            .get_physical_device_properties2(hal.raw_physical_device(), &mut props);
        Some(id.device_uuid)
    }
}

/// Imported frames by [`SharedFrame::id`]: the solver takes turns with
/// three, made anew when the display grid changes.
#[derive(Default)]
pub struct SharedImports {
    imports: Vec<(u64, wgpu::Buffer)>,
    /// Why imports do not work here; frames then go through host memory.
    pub refused: Option<String>,
}

/// Imports kept: the solver's three slots, and one more across a grid change.
const KEEP: usize = 4;

impl SharedImports {
    /// The buffer that holds `frame`'s texels, imported on first sight.
    pub fn buffer(&mut self, gpu: &Gpu, frame: &SharedFrame) -> Result<wgpu::Buffer, String> {
        if let Some(why) = &self.refused {
            return Err(why.clone());
        }
        if let Some((_, b)) = self.imports.iter().find(|(id, _)| *id == frame.id) {
            return Ok(b.clone());
        }
        let result = import(gpu, frame);
        match &result {
            Ok(b) => {
                if self.imports.len() == KEEP {
                    self.imports.remove(0);
                }
                self.imports.push((frame.id, b.clone()));
            }
            Err(e) => self.refused = Some(e.clone()),
        }
        result
    }
}

/// A device-local Vulkan buffer bound to the memory behind `frame.fd`.
fn import(gpu: &Gpu, frame: &SharedFrame) -> Result<wgpu::Buffer, String> {
    let ours = device_uuid(gpu).ok_or("the graphics device cannot import memory")?;
    if ours != frame.device {
        return Err("the solver runs on another GPU than the window".into());
    }
    let size = frame.data_bytes();
    if size > gpu.device.limits().max_buffer_size || size > frame.bytes {
        return Err(format!(
            "a frame of {size} bytes exceeds the graphics device's buffers"
        ));
    }
    // Vulkan takes the descriptor it imports: a duplicate, so that the
    // frame can be imported again (another window, a test).
    let fd = frame
        .fd
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| format!("duplicating the frame's descriptor: {e}"))?;
    // SAFETY: the buffer and memory are made, bound and handed to wgpu here,
    // which owns both from then on (and frees them when the buffer drops).
    let raw = unsafe {
        let hal = gpu.device.as_hal::<Vulkan>().ok_or("not a Vulkan device")?;
        let device = hal.raw_device();
        let buffer = external_buffer(device, size)?;
        let bound = bind_imported(&hal, buffer, fd, frame.bytes);
        match bound {
            Ok(memory) => wgpu::hal::vulkan::Buffer::from_raw_managed(buffer, memory, 0, size),
            Err(e) => {
                device.destroy_buffer(buffer, None);
                return Err(e);
            }
        }
    };
    // SAFETY: made on this device by `external_buffer`, bound to memory.
    Ok(unsafe { wrap(gpu, raw, size, "shared display frame") })
}

/// A Vulkan buffer of `size` bytes for external memory, with the usages of
/// [`wrap`].
unsafe fn external_buffer(device: &ash::Device, size: u64) -> Result<vk::Buffer, String> {
    let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(HANDLE);
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(
            vk::BufferUsageFlags::TRANSFER_SRC
                | vk::BufferUsageFlags::TRANSFER_DST
                | vk::BufferUsageFlags::STORAGE_BUFFER,
        )
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .push_next(&mut external);
    device
        .create_buffer(&info, None)
        .map_err(|e| format!("creating a buffer for external memory: {e}"))
}

/// An [`external_buffer`] bound to its memory, as a wgpu buffer.
unsafe fn wrap(gpu: &Gpu, raw: wgpu::hal::vulkan::Buffer, size: u64, label: &str) -> wgpu::Buffer {
    gpu.device.create_buffer_from_hal::<Vulkan>(
        raw,
        &wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        },
    )
}

/// The buffer's memory needs and a device-local memory type that meets them.
unsafe fn device_local(
    hal: &wgpu::hal::vulkan::Device,
    buffer: vk::Buffer,
) -> Result<(vk::MemoryRequirements, u32), String> {
    let device = hal.raw_device();
    let needs = device.get_buffer_memory_requirements(buffer);
    let types = hal
        .shared_instance()
        .raw_instance()
        .get_physical_device_memory_properties(hal.raw_physical_device());
    let index = (0..types.memory_type_count)
        .find(|&i| {
            needs.memory_type_bits & (1 << i) != 0
                && types.memory_types[i as usize]
                    .property_flags
                    .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
        })
        .ok_or("no device-local memory type for an imported buffer")?;
    Ok((needs, index))
}

/// Imports the `bytes` of memory behind `fd` and binds `buffer` to it.
unsafe fn bind_imported(
    hal: &wgpu::hal::vulkan::Device,
    buffer: vk::Buffer,
    fd: OwnedFd,
    bytes: u64,
) -> Result<vk::DeviceMemory, String> {
    let device = hal.raw_device();
    let (needs, index) = device_local(hal, buffer)?;
    if needs.size > bytes {
        return Err(format!(
            "the buffer needs {} bytes, the frame's memory has {bytes}",
            needs.size
        ));
    }
    let raw_fd = fd.into_raw_fd();
    let mut import = vk::ImportMemoryFdInfoKHR::default()
        .handle_type(HANDLE)
        .fd(raw_fd);
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(bytes)
        .memory_type_index(index)
        .push_next(&mut import);
    let memory = match device.allocate_memory(&info, None) {
        Ok(m) => m,
        Err(e) => {
            // On failure the descriptor is still ours.
            drop(OwnedFd::from_raw_fd(raw_fd));
            return Err(format!("importing the frame's memory: {e}"));
        }
    };
    if let Err(e) = device.bind_buffer_memory(buffer, memory, 0) {
        device.free_memory(memory, None);
        return Err(format!("binding the imported memory: {e}"));
    }
    Ok(memory)
}

/// Exportable device memory of `size` texels in the shared layout, made by
/// Vulkan itself, as a wgpu buffer and the frame that names it: the import
/// path's test on machines without CUDA.
pub fn export_for_test(gpu: &Gpu, size: [usize; 3]) -> Result<(wgpu::Buffer, SharedFrame), String> {
    let device_id = device_uuid(gpu).ok_or("the graphics device cannot export memory")?;
    let data = crate::solver::display::texel_row_bytes(size[0]) * (size[1] * size[2]) as u64;
    // SAFETY: as in `import`; the exported descriptor is a new one, ours.
    let (raw, fd, bytes) = unsafe {
        let hal = gpu.device.as_hal::<Vulkan>().ok_or("not a Vulkan device")?;
        let device = hal.raw_device();
        let buffer = external_buffer(device, data)?;
        let (needs, index) = device_local(&hal, buffer)?;
        let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(HANDLE);
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(needs.size)
            .memory_type_index(index)
            .push_next(&mut export);
        let memory = device
            .allocate_memory(&alloc, None)
            .map_err(|e| e.to_string())?;
        device
            .bind_buffer_memory(buffer, memory, 0)
            .map_err(|e| e.to_string())?;
        let fds =
            ash::khr::external_memory_fd::Device::new(hal.shared_instance().raw_instance(), device);
        let fd = fds
            .get_memory_fd(
                &vk::MemoryGetFdInfoKHR::default()
                    .memory(memory)
                    .handle_type(HANDLE),
            )
            .map_err(|e| format!("exporting memory: {e}"))?;
        (
            wgpu::hal::vulkan::Buffer::from_raw_managed(buffer, memory, 0, data),
            OwnedFd::from_raw_fd(fd),
            needs.size,
        )
    };
    // SAFETY: as in `import`.
    let buffer = unsafe { wrap(gpu, raw, data, "exported test frame") };
    Ok((buffer, SharedFrame::new(fd, bytes, size, device_id)))
}
