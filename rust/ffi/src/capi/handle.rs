//! The cluster handle table.
//!
//! A `racaffinity_cluster *` handed to C is never a real pointer: it encodes a
//! slot index and that slot's generation. Looking it up only decodes bits and
//! compares generations, so a stale, double-freed, foreign or random handle is
//! detected (`INVALID_HANDLE`) instead of being dereferenced.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwapOption;
use racaffinity_core::Cluster;

use super::result::{racaffinity_result, Failure};

/// Opaque cluster handle type for C (declared, never defined, in the header).
pub struct racaffinity_cluster {
    _private: (),
}

/// Live clusters a process can hold at once.
pub const RACAFFINITY_MAX_CLUSTERS: usize = 4096;

const MAX_CLUSTERS: usize = RACAFFINITY_MAX_CLUSTERS;

struct Entry {
    generation: u32,
    cluster: Cluster,
}

struct Slot {
    entry: ArcSwapOption<Entry>,
    generation: AtomicU32,
}

struct Table {
    slots: Box<[Slot]>,
    /// Free slot indices, reused oldest first so one slot's generation
    /// advances as slowly as possible; only `insert`/`remove` touch it.
    free: Mutex<VecDeque<u32>>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| Table {
        slots: (0..MAX_CLUSTERS)
            .map(|_| Slot { entry: ArcSwapOption::empty(), generation: AtomicU32::new(0) })
            .collect(),
        free: Mutex::new((0..MAX_CLUSTERS as u32).collect()),
    })
}

// Bits 0..16: slot index + 1 (so no handle is NULL); bits 16..48: generation;
// bits 48..63: a tag, so small integers and most real pointers never decode.
const TAG: u64 = 0x7a11 << 48;
const TAG_MASK: u64 = 0xffff << 48;

fn encode(index: u32, generation: u32) -> *mut racaffinity_cluster {
    let bits = TAG | (u64::from(generation) << 16) | (u64::from(index) + 1);
    bits as usize as *mut racaffinity_cluster
}

fn decode(h: *const racaffinity_cluster) -> Option<(usize, u32)> {
    let bits = h as usize as u64;
    if bits & TAG_MASK != TAG {
        return None;
    }
    let index = (bits & 0xffff).checked_sub(1)? as usize;
    let generation = ((bits >> 16) & 0xffff_ffff) as u32;
    (index < MAX_CLUSTERS && generation != 0).then_some((index, generation))
}

/// The free-slot list, for the fork handler to hold across a fork.
pub(crate) fn lock_free_list() -> std::sync::MutexGuard<'static, VecDeque<u32>> {
    table().free.lock().unwrap_or_else(|p| p.into_inner())
}

/// Registers a cluster and returns its handle.
pub(crate) fn insert(cluster: Cluster) -> Result<*mut racaffinity_cluster, Failure> {
    super::fork::register();
    let t = table();
    let index = t.free.lock().unwrap_or_else(|p| p.into_inner()).pop_front().ok_or_else(|| {
        Failure::new(racaffinity_result::TooManyHandles, format!("more than {MAX_CLUSTERS} live clusters"))
    })?;
    let slot = &t.slots[index as usize];
    // Generation 0 is never issued, so a zeroed handle can never match, and
    // a slot is retired before its generation could wrap (see `remove`), so a
    // stale handle can never match again. The entry is stored before the
    // generation is published, so a cached copy can only match once the new
    // entry is in place.
    let generation = slot.generation.load(Ordering::Acquire) + 1;
    slot.entry.store(Some(Arc::new(Entry { generation, cluster })));
    slot.generation.store(generation, Ordering::Release);
    Ok(encode(index, generation))
}

thread_local! {
    // The last handle this thread used. Checking it costs one plain atomic
    // load of the slot's generation, where an `ArcSwap` load and release cost
    // two locked instructions: most callers use one cluster, from many calls.
    // A freed cluster's memory is reclaimed once every thread that cached it
    // has made another call or exited.
    static LAST: RefCell<Option<(u64, Arc<Entry>)>> = const { RefCell::new(None) };
}

/// Runs `f` with the handle's cluster, or fails with INVALID_HANDLE / NULL_ARGUMENT.
#[inline]
pub(crate) fn with<R>(
    h: *const racaffinity_cluster,
    f: impl FnOnce(&Cluster) -> Result<R, Failure>,
) -> Result<R, Failure> {
    if h.is_null() {
        return Err(Failure::null("cluster"));
    }
    let (index, generation) = decode(h).ok_or_else(invalid)?;
    let bits = h as usize as u64;
    let slot = &table().slots[index];
    let mut f = Some(f);
    let hit = LAST.try_with(|last| {
        let last = last.borrow();
        match &*last {
            // The slot's generation moves on when the handle is freed, so a
            // match means the cached entry is still this handle's.
            Some((b, e)) if *b == bits && slot.generation.load(Ordering::Acquire) == generation => {
                Some(overtaken((f.take().expect("called once"))(&e.cluster), &e.cluster))
            }
            _ => None,
        }
    });
    if let Ok(Some(r)) = hit {
        return r;
    }
    match slot.entry.load_full() {
        Some(e) if e.generation == generation => {
            let r = overtaken((f.take().expect("called once"))(&e.cluster), &e.cluster);
            let _ = LAST.try_with(|last| *last.borrow_mut() = Some((bits, e)));
            r
        }
        _ => {
            let _ = LAST.try_with(|last| {
                let mut last = last.borrow_mut();
                if matches!(&*last, Some((b, _)) if *b == bits) {
                    *last = None;
                }
            });
            Err(invalid())
        }
    }
}

/// A call that failed on a cluster another thread freed meanwhile gets
/// INVALID_HANDLE: its error may be the free's doing (the free empties the
/// registries, so a lease or transaction the call names is gone), and the
/// contract is that such a call finishes on the old cluster or gets
/// INVALID_HANDLE. Successes stand.
#[inline]
fn overtaken<R>(r: Result<R, Failure>, c: &Cluster) -> Result<R, Failure> {
    match r {
        Err(_) if c.is_closed() => Err(invalid()),
        r => r,
    }
}

/// A stable 64-bit identity of the handle, stamped into leases.
pub(crate) fn tag(h: *const racaffinity_cluster) -> u64 {
    h as usize as u64
}

/// Unregisters a handle. The cluster is dropped once in-flight calls finish.
pub(crate) fn remove(h: *const racaffinity_cluster) -> Result<(), Failure> {
    let (index, generation) = decode(h).ok_or_else(invalid)?;
    let t = table();
    let slot = &t.slots[index];
    let cur = slot.entry.load_full();
    match cur {
        Some(ref e) if e.generation == generation => {
            // Only the caller whose swap replaces this exact entry frees the
            // slot, so two racing frees cannot both succeed.
            let prev = slot.entry.compare_and_swap(&cur, None);
            if !matches!((&*prev, &cur), (Some(a), Some(b)) if Arc::ptr_eq(a, b)) {
                return Err(invalid());
            }
            // Invalidates every thread's cached copy of this handle.
            let next = slot.generation.fetch_add(1, Ordering::AcqRel) + 1;
            // Another thread's cache may keep the entry alive until its next
            // call: release what the cluster holds for its hosts now.
            e.cluster.close();
            let _ = LAST.try_with(|last| {
                let mut last = last.borrow_mut();
                if matches!(&*last, Some((b, _)) if *b == h as usize as u64) {
                    *last = None;
                }
            });
            // With FIFO reuse over 4096 slots a slot retires after about 2^43
            // creates; retiring it keeps every handle it ever issued stale.
            if next < RETIRE_AT {
                t.free.lock().unwrap_or_else(|p| p.into_inner()).push_back(index as u32);
            }
            Ok(())
        }
        _ => Err(invalid()),
    }
}

/// A slot whose generation reached this is never reused.
const RETIRE_AT: u32 = u32::MAX - 1;

fn invalid() -> Failure {
    Failure::new(racaffinity_result::InvalidHandle, "invalid cluster handle (stale, freed, foreign or corrupt)")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn cluster() -> Cluster {
        Cluster::from_config_text("nodes = A, B").unwrap()
    }

    /// The handle table is process-wide: these tests take turns with it.
    pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: Mutex<()> = Mutex::new(());
        SERIAL.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[test]
    fn a_slot_near_the_end_of_its_generations_is_retired_not_reused() {
        let _turn = serial();
        let h = insert(cluster()).unwrap();
        let (index, _) = decode(h).unwrap();
        remove(h).unwrap();
        // Fast-forward this slot to the edge of its generation space.
        let slot = &table().slots[index];
        slot.generation.store(RETIRE_AT - 2, Ordering::Release);
        let last = {
            let mut free = table().free.lock().unwrap();
            free.retain(|&i| i as usize != index);
            free.push_front(index as u32);
            drop(free);
            insert(cluster()).unwrap()
        };
        assert_eq!(decode(last).unwrap().0, index);
        remove(last).unwrap();
        assert!(!table().free.lock().unwrap().contains(&(index as u32)), "a slot at its last generation came back");
        assert!(with(last, |_| Ok(())).is_err());
        assert!(with(h, |_| Ok(())).is_err());
    }

    /// The C thread test saw this once under valgrind: a release that passed
    /// the handle check just before another thread freed the cluster found
    /// its lease gone with the freed registries and answered INVALID_LEASE.
    /// A call the free overtook finishes on the old cluster or gets
    /// INVALID_HANDLE, never an error the free itself caused.
    #[test]
    fn a_call_that_fails_because_the_cluster_was_freed_under_it_is_invalid_handle() {
        let _turn = serial();
        let h = insert(cluster()).unwrap();
        let token = with(h, |c| Ok(c.open_lease(racaffinity_core::NodeId(0))?)).unwrap();
        let bits = h as usize;
        let r = with(h, |c| {
            // Another thread's free, between this call's handle check and its work.
            std::thread::spawn(move || remove(bits as *const racaffinity_cluster).unwrap()).join().unwrap();
            Ok(c.close_lease(token, racaffinity_core::Outcome::Ok)?)
        });
        assert_eq!(r.unwrap_err().code, racaffinity_result::InvalidHandle);
        // Errors of the caller's own making stay what they are while the handle lives.
        let h = insert(cluster()).unwrap();
        let r = with(h, |c| Ok(c.close_lease(racaffinity_core::LeaseToken(999), racaffinity_core::Outcome::Ok)?));
        assert_eq!(r.unwrap_err().code, racaffinity_result::InvalidLease);
        remove(h).unwrap();
    }

    #[test]
    fn freeing_a_handle_releases_the_clusters_registries_even_if_cached_elsewhere() {
        let _turn = serial();
        let c = cluster();
        let shell = c.clone();
        let h = insert(c).unwrap();
        with(h, |c| {
            for i in 0..100 {
                c.tx_begin(format!("g{i}").as_bytes()).unwrap();
            }
            Ok(())
        })
        .unwrap();
        // Another thread caches the handle and stays idle.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (cached_tx, cached) = std::sync::mpsc::channel::<()>();
        let bits = h as usize;
        let idle = std::thread::spawn(move || {
            with(bits as *const racaffinity_cluster, |_| Ok(())).unwrap();
            cached_tx.send(()).unwrap();
            rx.recv().ok();
        });
        cached.recv().unwrap();
        remove(h).unwrap();
        assert!(shell.is_closed());
        assert_eq!(shell.tx_count(), 0, "the freed cluster's transactions stayed in memory");
        tx.send(()).unwrap();
        idle.join().unwrap();
    }
}
