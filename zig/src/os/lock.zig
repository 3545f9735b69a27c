//! Cross-process locks of one open store: two advisory lock files in the store's folder, locked
//! with flock (LockFileEx on Windows), so the kernel drops a dead process's locks by itself.
//!
//! - `open.lock`: every open handle holds it shared for as long as it is open. delete, compact
//!   and train_dict convert it to exclusive for their duration, which succeeds only when no
//!   other handle, in this process or another, has the store open; opening waits while one runs.
//! - `writer.lock`: the one writing handle holds it exclusive, from its first write until it
//!   closes. Readers never touch it, so an appender never blocks them.
//! - `maintenance.lock`: held exclusive while a handle converts open.lock from shared to
//!   exclusive. flock cannot convert atomically: in the gap the converting handle holds nothing
//!   on open.lock, and a second handle converting at that moment would find the store free and
//!   run its delete/compact beside an open handle. A handle that finds maintenance.lock held is
//!   refused at once instead: its holder is another handle that has the store open.
//!
//! flock locks belong to an open file description, so each handle opens the files itself (two
//! handles in one process exclude each other like two processes), and a forked child, which
//! shares its parent's descriptions, must drop its copies and lock through its own (see
//! `forgetAfterFork`). A read-only handle takes no writer lock and creates nothing.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const errors = @import("../base/errors.zig");
const diagnostic = @import("../base/diagnostic.zig");
const status = @import("../base/status.zig");
const no_follow = @import("no_follow.zig");
const Error = errors.Error;

pub const open_file_name = "open.lock";
pub const writer_file_name = "writer.lock";
pub const maintenance_file_name = "maintenance.lock";

/// How long opening (or re-locking after fork or a refused maintenance call) waits for another
/// handle's delete/compact/train_dict to finish before giving up with StoreLocked.
pub const shared_wait_ms: u32 = 60_000;
const poll_ms: u32 = 5;

pub const Locks = struct {
    /// The handle's open.lock description; null only for a read-only handle on a folder where
    /// the file is absent and cannot be created (a read-only filesystem nobody can write to).
    open_file: ?Io.File,
    writer_file: ?Io.File = null,
    /// Null for a read-only handle (and after a fork, until the next maintenance call); locked
    /// only while converting open.lock.
    maintenance_file: ?Io.File = null,
    read_only: bool,
    /// Whether open_file currently holds the shared lock (false after a fork, until `relock`).
    /// Written atomically: guardsLength reads it from threads that do not hold the store.
    shared_held: bool = false,
    writer_held: bool = false,
    /// Set in a forked child: the next call locks through fresh descriptions first.
    relock_needed: std.atomic.Value(bool) = .init(false),

    /// Whether this handle holds open.lock shared right now. While it does, no other handle, in
    /// this process or another, can run a delete or a compaction on the store (they need the
    /// lock exclusive), so only this handle's own calls can lower its length. Not so for a
    /// read-only handle without open.lock, a forked child before its first call on the store
    /// (forgetAfterFork: its parent may delete meanwhile, through a mapping the child shares),
    /// or a handle whose re-lock failed. Read without the store's lock (View.checkRouting):
    /// both fields change only under the store's exclusive lock (maintenance, relock) or in a
    /// forked child, and every change that ends the guard is followed by a bump of the length
    /// generation (Store.endMaintenance, beginMaintenance's failures, afterForkChild).
    pub fn guardsLength(locks: *const Locks) bool {
        return !locks.relock_needed.load(.acquire) and @atomicLoad(bool, &locks.shared_held, .acquire);
    }

    /// Opens (creating it unless read-only) open.lock and takes it shared, waiting up to
    /// shared_wait_ms while another handle holds the store exclusively.
    pub fn acquire(io: Io, dir: Io.Dir, read_only: bool) Error!Locks {
        var locks: Locks = .{ .open_file = try openLockFile(io, dir, open_file_name, read_only), .read_only = read_only };
        errdefer locks.release(io);
        // Created with the other lock files, so a refused maintenance call adds no file.
        if (!read_only) locks.maintenance_file = try openLockFile(io, dir, maintenance_file_name, false);
        try locks.takeShared(io);
        return locks;
    }

    /// Drops both locks and closes the files.
    pub fn release(locks: *Locks, io: Io) void {
        if (locks.maintenance_file) |f| f.close(io);
        if (locks.writer_file) |f| {
            if (locks.writer_held) f.unlock(io);
            f.close(io);
        }
        if (locks.open_file) |f| {
            if (locks.shared_held) f.unlock(io);
            f.close(io);
        }
        locks.* = undefined;
    }

    /// Makes this handle the store's writer (idempotent). The caller serialises writers of this
    /// handle (the append mutex or the store's exclusive lock).
    pub fn holdWriter(locks: *Locks, io: Io, dir: Io.Dir) Error!void {
        if (locks.writer_held) return;
        if (locks.read_only) {
            diagnostic.note("the store was opened read-only", .{});
            return error.ReadOnly;
        }
        if (locks.writer_file == null) locks.writer_file = try openLockFile(io, dir, writer_file_name, false);
        const f = locks.writer_file.?;
        const taken = f.tryLock(io, .exclusive) catch |err| return lockFailed(err, writer_file_name);
        if (!taken) {
            diagnostic.note("another handle is writing to this store (in this or another process: it holds {s} from its first write until it closes); " ++
                "a store has one writer at a time: close the other handle, or open this one with readonly=True", .{writer_file_name});
            return error.StoreLocked;
        }
        locks.writer_held = true;
    }

    /// Converts the shared lock to exclusive for `operation`; refuses with StoreLocked while any
    /// other handle has the store open. The caller holds the store's in-process exclusive lock.
    /// A refusal may have let another handle's maintenance run in between: `refreshed` is set
    /// when the caller must drop what it cached of the files (chunk mappings, the dictionary).
    pub fn takeExclusive(locks: *Locks, io: Io, dir: Io.Dir, operation: []const u8, refreshed: *bool) Error!void {
        refreshed.* = false;
        const f = locks.open_file orelse {
            diagnostic.note("{s} needs the store to itself, but {s} is missing and cannot be created here", .{ operation, open_file_name });
            return error.StoreLocked;
        };
        std.debug.assert(locks.shared_held);
        std.debug.assert(!locks.read_only); // maintenance refuses read-only handles first
        if (locks.maintenance_file == null) locks.maintenance_file = try openLockFile(io, dir, maintenance_file_name, false);
        const gate = locks.maintenance_file.?;
        const converting = gate.tryLock(io, .exclusive) catch |err| return lockFailed(err, maintenance_file_name);
        if (!converting) return refuseOpenElsewhere(operation);
        defer gate.unlock(io);
        // flock cannot convert without a gap: the shared lock goes, then exclusivity is tried.
        // The gate above keeps every other handle from converting inside that gap.
        f.unlock(io);
        @atomicStore(bool, &locks.shared_held, false, .release);
        const taken = f.tryLock(io, .exclusive) catch |err| {
            refreshed.* = true;
            locks.takeShared(io) catch {};
            return lockFailed(err, open_file_name);
        };
        if (taken) return;
        refreshed.* = true;
        locks.takeShared(io) catch |err| {
            locks.relock_needed.store(true, .release);
            return err;
        };
        return refuseOpenElsewhere(operation);
    }

    /// Returns from exclusive to shared after maintenance (atomically: nobody slips in).
    pub fn releaseExclusive(locks: *Locks, io: Io) void {
        const f = locks.open_file.?;
        f.downgradeLock(io) catch {
            // Only a cancellation can fail here; the lock is then simply re-taken shared.
            f.unlock(io);
            locks.takeShared(io) catch locks.relock_needed.store(true, .release);
            return;
        };
        @atomicStore(bool, &locks.shared_held, true, .release);
    }

    /// In a forked child: the inherited descriptions are the parent's (unlocking them would
    /// drop the parent's locks), so they are closed unlocked and the next call re-locks.
    pub fn forgetAfterFork(locks: *Locks) void {
        if (builtin.os.tag == .windows) return; // no fork there
        if (locks.maintenance_file) |f| _ = std.c.close(f.handle);
        locks.maintenance_file = null;
        if (locks.writer_file) |f| _ = std.c.close(f.handle);
        if (locks.open_file) |f| _ = std.c.close(f.handle);
        locks.writer_file = null;
        locks.open_file = null;
        locks.writer_held = false;
        @atomicStore(bool, &locks.shared_held, false, .release);
        locks.relock_needed.store(true, .release);
    }

    /// Takes the shared lock through a fresh description (after fork or a failed re-lock).
    pub fn relock(locks: *Locks, io: Io, dir: Io.Dir) Error!void {
        if (locks.open_file == null) locks.open_file = try openLockFile(io, dir, open_file_name, locks.read_only);
        if (!locks.shared_held) try locks.takeShared(io);
        locks.relock_needed.store(false, .release);
    }

    fn takeShared(locks: *Locks, io: Io) Error!void {
        const f = locks.open_file orelse return;
        var waited_ms: u32 = 0;
        while (true) {
            const taken = f.tryLock(io, .shared) catch |err| return lockFailed(err, open_file_name);
            if (taken) break;
            if (waited_ms >= shared_wait_ms) {
                diagnostic.note("another handle has held the store exclusively (a delete, compact or train_dict holding {s}) for over {d} s; try again later", .{ open_file_name, shared_wait_ms / 1000 });
                return error.StoreLocked;
            }
            io.sleep(.fromMilliseconds(poll_ms), .awake) catch {};
            waited_ms += poll_ms;
        }
        @atomicStore(bool, &locks.shared_held, true, .release);
    }
};

fn refuseOpenElsewhere(operation: []const u8) Error {
    diagnostic.note("{s} needs the store to itself, but another handle (in this or another process, a reader or a writer) has it open: " ++
        "every open handle holds {s} shared; close the others first", .{ operation, open_file_name });
    return error.StoreLocked;
}

/// Opens a lock file, creating it for a writable handle. A read-only handle opens it read-only
/// (flock needs no write access) and goes without when it is absent or unreadable.
/// Never through a link: a symlink in the lock file's place is refused (Corrupt, naming it),
/// since creating or locking the file it names would act on a file outside the store.
fn openLockFile(io: Io, dir: Io.Dir, name: []const u8, read_only: bool) Error!?Io.File {
    if (read_only) {
        return dir.openFile(io, name, .{ .mode = .read_only, .follow_symlinks = false }) catch |err| switch (err) {
            error.FileNotFound, error.AccessDenied, error.PermissionDenied => null,
            error.SymLinkLoop => return no_follow.refuse(io, dir, name, "lock file"),
            else => return failOpen(err, name),
        };
    }
    return no_follow.openOrCreate(io, dir, name) catch |err| switch (err) {
        error.SymLinkLoop => return no_follow.refuse(io, dir, name, "lock file"),
        else => return failCreate(err, name),
    };
}

fn failCreate(err: anyerror, name: []const u8) Error {
    switch (err) {
        error.AccessDenied, error.PermissionDenied, error.ReadOnlyFileSystem => {
            diagnostic.note("cannot create the lock file {s} ({t}): the store folder is not writable here; open it with readonly=True to read it", .{ name, err });
            return error.PermissionDenied;
        },
        else => return failOpen(err, name),
    }
}

fn failOpen(err: anyerror, name: []const u8) Error {
    // A folder out of inodes (or blocks) is a full disk like any other: named the way meta.fail
    // names it, so Python raises OSError(ENOSPC) rather than an OSError without an errno.
    if (err == error.NoSpaceLeft) {
        diagnostic.note("cannot create the lock file {s}: no space left on device (ENOSPC)", .{name});
        return errors.fromStd(err);
    }
    diagnostic.note("cannot open the lock file {s}: {t}", .{ name, err });
    return errors.fromStd(err);
}

fn lockFailed(err: anyerror, name: []const u8) Error {
    diagnostic.note("cannot lock {s}: {t} (the filesystem may not support file locks)", .{ name, err });
    return errors.fromStd(err);
}

test "a second writer and maintenance beside another open handle are refused" {
    const io = std.testing.io;
    var tmp = std.testing.tmpDir(.{});
    defer tmp.cleanup();
    var a = try Locks.acquire(io, tmp.dir, false);
    defer a.release(io);
    var b = try Locks.acquire(io, tmp.dir, false);
    var b_open = true;
    defer if (b_open) b.release(io);
    try a.holdWriter(io, tmp.dir);
    try std.testing.expectError(error.StoreLocked, b.holdWriter(io, tmp.dir));
    var refreshed = false;
    try std.testing.expectError(error.StoreLocked, a.takeExclusive(io, tmp.dir, "compact", &refreshed));
    try std.testing.expect(a.shared_held);
    b.release(io);
    b_open = false;
    try a.takeExclusive(io, tmp.dir, "compact", &refreshed);
    try std.testing.expect(!refreshed);
    a.releaseExclusive(io);
    var r = try Locks.acquire(io, tmp.dir, true);
    defer r.release(io);
    try std.testing.expectError(error.ReadOnly, r.holdWriter(io, tmp.dir));
}

test "a handle in the gap of its own conversion still keeps the store from another handle" {
    const io = std.testing.io;
    var tmp = std.testing.tmpDir(.{});
    defer tmp.cleanup();
    var a = try Locks.acquire(io, tmp.dir, false);
    defer a.release(io);
    var b = try Locks.acquire(io, tmp.dir, false);
    defer b.release(io);
    // b stops exactly where takeExclusive leaves it between dropping shared and trying
    // exclusive: the gate held, nothing held on open.lock.
    const gate = b.maintenance_file.?;
    try std.testing.expect(try gate.tryLock(io, .exclusive));
    b.open_file.?.unlock(io);
    b.shared_held = false;
    var refreshed = false;
    try std.testing.expectError(error.StoreLocked, a.takeExclusive(io, tmp.dir, "compact", &refreshed));
    try std.testing.expect(a.shared_held and !refreshed);
    // b finishes its refused conversion: back to shared, gate released; a is still refused.
    try b.takeShared(io);
    gate.unlock(io);
    try std.testing.expectError(error.StoreLocked, a.takeExclusive(io, tmp.dir, "compact", &refreshed));
    try std.testing.expect(a.shared_held);
}

test "a lock file that is a symlink is refused and nothing is made or locked where it points" {
    const io = std.testing.io;
    var tmp = std.testing.tmpDir(.{});
    defer tmp.cleanup();
    try tmp.dir.createDir(io, "store", .default_dir);
    try tmp.dir.createDir(io, "outside", .default_dir);
    var store = try tmp.dir.openDir(io, "store", .{});
    defer store.close(io);
    var outside = try tmp.dir.openDir(io, "outside", .{});
    defer outside.close(io);
    const names = [_][]const u8{ open_file_name, maintenance_file_name, writer_file_name };
    for (names) |name| {
        try store.symLink(io, "../outside/target", name, .{});
        if (std.mem.eql(u8, name, writer_file_name)) {
            var locks = try Locks.acquire(io, store, false);
            defer locks.release(io);
            try std.testing.expectError(error.Corrupt, locks.holdWriter(io, store));
            try std.testing.expect(!locks.writer_held and locks.writer_file == null);
        } else {
            try std.testing.expectError(error.Corrupt, Locks.acquire(io, store, false));
            if (std.mem.eql(u8, name, open_file_name)) {
                // A read-only handle does not lock through the link either.
                try std.testing.expectError(error.Corrupt, Locks.acquire(io, store, true));
            }
        }
        try std.testing.expectError(error.FileNotFound, outside.access(io, "target", .{}));
        // Linked to an existing file, that file is neither opened for locking nor changed.
        var target = try outside.createFile(io, "target", .{});
        target.close(io);
        if (!std.mem.eql(u8, name, writer_file_name)) {
            try std.testing.expectError(error.Corrupt, Locks.acquire(io, store, false));
        }
        try outside.deleteFile(io, "target");
        try store.deleteFile(io, name);
    }
    // With the links gone, the store's own lock files are made as before.
    var locks = try Locks.acquire(io, store, false);
    defer locks.release(io);
    try locks.holdWriter(io, store);
}
