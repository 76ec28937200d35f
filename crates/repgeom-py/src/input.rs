//! Arrays in from Python without copying where the layout allows.
//!
//! Two sources: NumPy arrays (read through the array object's data pointer and byte strides)
//! and any object with `__dlpack__` (PyTorch, JAX, CuPy…; read through the DLPack capsule).
//! `f32` data of any strides is viewed in place as a faer `MatRef`; `f16`, `bf16` and `f64`
//! are converted to an owned `f32` matrix (the engine's precision for distances), and bases that
//! must stay `f64` are converted to `f64`. Memory stays owned by the Python object, which the
//! caller keeps alive (the [`Raw`] borrows it) while the view is in use.
//!
//! This is the crate's only `unsafe` code: reading memory described by a pointer, a shape and
//! strides that NumPy or the DLPack producer vouch for.
#![allow(unsafe_code)]

use std::ffi::c_void;

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use repgeom_linalg::{Mat, MatRef};

use crate::errors::Failure;

/// Element type of an input array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elem {
    F16,
    Bf16,
    F32,
    F64,
}

impl Elem {
    fn size(self) -> usize {
        match self {
            Elem::F16 | Elem::Bf16 => 2,
            Elem::F32 => 4,
            Elem::F64 => 8,
        }
    }
    pub(crate) fn name(self) -> &'static str {
        match self {
            Elem::F16 => "float16",
            Elem::Bf16 => "bfloat16",
            Elem::F32 => "float32",
            Elem::F64 => "float64",
        }
    }
}

/// A 2-D array in memory owned by a Python object: address, element type, shape and strides
/// in elements. `Send`, so it can cross into the computation while the GIL is released; the
/// `'py` lifetime ties it to the borrowed owner, which keeps the memory alive.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Raw<'py> {
    addr: usize,
    pub(crate) elem: Elem,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    row_stride: isize,
    col_stride: isize,
    _owner: std::marker::PhantomData<&'py ()>,
}

/// Holds the Python objects whose memory a [`Raw`] points into (the array, or the DLPack
/// capsule whose destructor frees the producer's context).
#[derive(Debug, Default)]
pub(crate) struct Keep<'py> {
    objects: Vec<Bound<'py, PyAny>>,
}

impl<'py> Keep<'py> {
    pub(crate) fn new() -> Self {
        Self {
            objects: Vec::new(),
        }
    }
}

/// A matrix ready for the engine: a view of the caller's memory or a converted copy.
#[derive(Debug)]
pub(crate) enum Matrix32<'a> {
    View(MatRef<'a, f32>),
    Owned(Mat<f32>),
}

impl Matrix32<'_> {
    pub(crate) fn as_ref(&self) -> MatRef<'_, f32> {
        match self {
            Matrix32::View(m) => *m,
            Matrix32::Owned(m) => m.as_ref(),
        }
    }
    pub(crate) fn copied(&self) -> bool {
        matches!(self, Matrix32::Owned(_))
    }
}

// SAFETY: `Raw` is plain data (an address and a layout); the memory it describes is read-only
// for us and kept alive by the `Keep` of the same `'py` scope.
unsafe impl Send for Raw<'_> {}
unsafe impl Sync for Raw<'_> {}

impl<'py> Raw<'py> {
    /// Address of element (0, 0).
    pub(crate) fn addr(&self) -> usize {
        self.addr
    }

    /// Reads element (i, j) as f64.
    ///
    /// # Safety
    /// `i < rows`, `j < cols`, and the memory described by `self` is alive and readable.
    unsafe fn get(&self, i: usize, j: usize) -> f64 {
        let offset = (i as isize * self.row_stride + j as isize * self.col_stride)
            * self.elem.size() as isize;
        let p = (self.addr as isize + offset) as *const u8;
        // SAFETY: the caller guarantees (i, j) is inside the array; the producer guarantees
        // the element is aligned (checked for NumPy, part of the DLPack contract).
        unsafe {
            match self.elem {
                Elem::F16 => half::f16::from_bits(*(p as *const u16)).to_f64(),
                Elem::Bf16 => half::bf16::from_bits(*(p as *const u16)).to_f64(),
                Elem::F32 => f64::from(*(p as *const f32)),
                Elem::F64 => *(p as *const f64),
            }
        }
    }

    /// The engine's `f32` matrix: a view of the memory when it already holds `f32` (any
    /// strides), else a converted copy.
    pub(crate) fn to_f32(self) -> Matrix32<'py> {
        if self.elem == Elem::F32 {
            // SAFETY: NumPy / DLPack describe `rows × cols` elements at these strides from
            // `addr`, alive for `'py` (see `Keep`); we never write through the view.
            let view = unsafe {
                MatRef::from_raw_parts(
                    self.addr as *const f32,
                    self.rows,
                    self.cols,
                    self.row_stride,
                    self.col_stride,
                )
            };
            return Matrix32::View(view);
        }
        // SAFETY: indices are in range by construction of `from_fn`.
        Matrix32::Owned(Mat::from_fn(self.rows, self.cols, |i, j| unsafe {
            self.get(i, j) as f32
        }))
    }

    /// An `f64` copy (bases, whose precision matters for the decompositions).
    pub(crate) fn to_f64(self) -> Mat<f64> {
        // SAFETY: indices are in range by construction of `from_fn`.
        Mat::from_fn(self.rows, self.cols, |i, j| unsafe { self.get(i, j) })
    }
}

/// A validated input array, 2-D or 3-D, as layouts of 2-D slices (one per leading index).
#[derive(Debug)]
pub(crate) struct RawNd<'py> {
    pub(crate) shape: Vec<usize>,
    base: Raw<'py>,
    lead_stride: isize,
}

impl<'py> RawNd<'py> {
    /// The `i`-th `[rows, cols]` slice of a 3-D array, or the array itself when 2-D.
    pub(crate) fn slice(&self, i: usize) -> Raw<'py> {
        Raw {
            addr: (self.base.addr as isize
                + i as isize * self.lead_stride * self.base.elem.size() as isize)
                as usize,
            ..self.base
        }
    }
    pub(crate) fn elem(&self) -> Elem {
        self.base.elem
    }
}

/// Reads `obj` (a NumPy array, an object with `__dlpack__`, or anything `numpy.asarray`
/// accepts) as a 2-D or 3-D float array. `what` names it in messages.
pub(crate) fn read_array<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
    keep: &mut Keep<'py>,
) -> Result<RawNd<'py>, Failure> {
    let py = obj.py();
    let np = py.import("numpy").map_err(Failure::from_py)?;
    let is_ndarray = obj
        .is_instance(&np.getattr("ndarray").map_err(Failure::from_py)?)
        .map_err(Failure::from_py)?;
    if !is_ndarray && obj.hasattr("__dlpack__").map_err(Failure::from_py)? {
        return read_dlpack(obj, what, keep);
    }
    let arr = if is_ndarray {
        obj.clone()
    } else {
        np.call_method1("asarray", (obj,)).map_err(|e| {
            Failure::Invalid(format!(
                "{what}: expected a NumPy array, a tensor with __dlpack__ or a nested list of numbers ({e})"
            ))
        })?
    };
    let untyped = arr
        .cast::<PyUntypedArray>()
        .map_err(|_| Failure::Invalid(format!("{what}: not an array")))?;
    let dtype = untyped.dtype();
    let native = dtype.is_native_byteorder().unwrap_or(true);
    let elem = match (dtype.kind(), dtype.itemsize()) {
        (b'f', 2) => Some(Elem::F16),
        (b'f', 4) => Some(Elem::F32),
        (b'f', 8) => Some(Elem::F64),
        _ => None,
    };
    let (elem, untyped) = match elem {
        Some(e) if native && untyped.is_aligned() => (e, untyped.clone()),
        _ => {
            if !matches!(dtype.kind(), b'f' | b'i' | b'u' | b'b') {
                return Err(Failure::Invalid(format!(
                    "{what}: dtype {} is not numeric; expected float16, bfloat16, float32 or float64",
                    dtype.str().map(|s| s.to_string()).unwrap_or_default()
                )));
            }
            // Integers, big-endian or unaligned data: one converting copy through NumPy.
            let conv = np
                .call_method1("ascontiguousarray", (&arr, "float32"))
                .map_err(Failure::from_py)?;
            let conv = conv
                .cast_into::<PyUntypedArray>()
                .map_err(|_| Failure::Invalid(format!("{what}: not an array")))?;
            (Elem::F32, conv)
        }
    };
    let shape = untyped.shape().to_vec();
    let strides_bytes = untyped.strides().to_vec();
    // SAFETY: `as_array_ptr` is a live PyArrayObject (we hold a reference); `data` is its
    // buffer pointer.
    let addr = unsafe { (*untyped.as_array_ptr()).fields.data } as usize;
    let size = elem.size() as isize;
    if strides_bytes.iter().any(|s| s % size != 0) {
        return Err(Failure::Invalid(format!(
            "{what}: strides {strides_bytes:?} are not multiples of the element size"
        )));
    }
    let strides: Vec<isize> = strides_bytes.iter().map(|s| s / size).collect();
    keep.objects.push(untyped.into_any());
    build(addr, elem, shape, strides, what)
}

fn build<'py>(
    addr: usize,
    elem: Elem,
    shape: Vec<usize>,
    strides: Vec<isize>,
    what: &str,
) -> Result<RawNd<'py>, Failure> {
    let (lead_stride, rows, cols, rs, cs) = match (shape.as_slice(), strides.as_slice()) {
        ([r, c], [rs, cs]) => (0, *r, *c, *rs, *cs),
        ([_, r, c], [ls, rs, cs]) => (*ls, *r, *c, *rs, *cs),
        _ => {
            return Err(Failure::Invalid(format!(
                "{what}: expected a 2-D [N, d] or 3-D [L, N, d] array, got shape {shape:?}"
            )));
        }
    };
    Ok(RawNd {
        shape,
        base: Raw {
            addr,
            elem,
            rows,
            cols,
            row_stride: rs,
            col_stride: cs,
            _owner: std::marker::PhantomData,
        },
        lead_stride,
    })
}

// DLPack (https://dmlc.github.io/dlpack/latest/c_api.html), the unversioned ABI every
// producer still returns from `__dlpack__()` without arguments.
#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}
#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}
#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}
#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

const DL_CPU: i32 = 1;
const DL_CUDA_HOST: i32 = 3;

fn device_name(t: i32) -> &'static str {
    match t {
        2 => "cuda",
        4 => "opencl",
        7 => "vulkan",
        8 => "metal",
        10 => "rocm",
        13 => "cuda (managed)",
        _ => "an accelerator",
    }
}

fn read_dlpack<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
    keep: &mut Keep<'py>,
) -> Result<RawNd<'py>, Failure> {
    if let Ok(dev) = obj.call_method0("__dlpack_device__")
        && let Ok((kind, id)) = dev.extract::<(i32, i32)>()
        && kind != DL_CPU
        && kind != DL_CUDA_HOST
    {
        return Err(Failure::Invalid(format!(
            "{what}: the tensor lives on {}:{id}; repgeom computes on the CPU: pass tensor.cpu() (or .detach().cpu())",
            device_name(kind)
        )));
    }
    // Tensors that require grad refuse export; their values are what we want.
    let obj = if obj
        .getattr("requires_grad")
        .and_then(|r| r.is_truthy())
        .unwrap_or(false)
    {
        obj.call_method0("detach").map_err(Failure::from_py)?
    } else {
        obj.clone()
    };
    let capsule = obj.call_method0("__dlpack__").map_err(Failure::from_py)?;
    let capsule = capsule
        .cast_into::<PyCapsule>()
        .map_err(|_| Failure::Invalid(format!("{what}: __dlpack__ did not return a capsule")))?;
    let ptr = capsule
        .pointer_checked(Some(c"dltensor"))
        .map_err(Failure::from_py)?;
    // SAFETY: a capsule named "dltensor" holds a DLManagedTensor, alive until the capsule is
    // destroyed; we keep the capsule in `keep` and never rename it, so its destructor (not us)
    // calls the deleter.
    let t = unsafe { &(*(ptr.as_ptr() as *const DlManagedTensor)).dl_tensor };
    if t.device.device_type != DL_CPU && t.device.device_type != DL_CUDA_HOST {
        return Err(Failure::Invalid(format!(
            "{what}: the tensor lives on {}:{}; repgeom computes on the CPU: pass tensor.cpu()",
            device_name(t.device.device_type),
            t.device.device_id
        )));
    }
    let elem = match (t.dtype.code, t.dtype.bits, t.dtype.lanes) {
        (2, 16, 1) => Elem::F16,
        (2, 32, 1) => Elem::F32,
        (2, 64, 1) => Elem::F64,
        (4, 16, 1) => Elem::Bf16,
        (code, bits, lanes) => {
            return Err(Failure::Invalid(format!(
                "{what}: DLPack dtype (code {code}, {bits} bits, {lanes} lanes) is not float16, bfloat16, float32 or float64; convert with tensor.float()"
            )));
        }
    };
    let ndim = usize::try_from(t.ndim).unwrap_or(0);
    // SAFETY: `shape` (and `strides` when non-null) point to `ndim` int64 values.
    let shape: Vec<usize> = (0..ndim)
        .map(|i| unsafe { *t.shape.add(i) } as usize)
        .collect();
    let strides: Vec<isize> = if t.strides.is_null() {
        let mut s = vec![1isize; ndim];
        for i in (0..ndim.saturating_sub(1)).rev() {
            s[i] = s[i + 1] * shape[i + 1] as isize;
        }
        s
    } else {
        (0..ndim)
            .map(|i| unsafe { *t.strides.add(i) } as isize)
            .collect()
    };
    let addr = t.data as usize + t.byte_offset as usize;
    if !addr.is_multiple_of(elem.size()) {
        return Err(Failure::Invalid(format!(
            "{what}: DLPack data is not aligned to its element size"
        )));
    }
    keep.objects.push(capsule.into_any());
    build(addr, elem, shape, strides, what)
}
