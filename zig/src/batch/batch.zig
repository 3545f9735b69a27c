//! The shapes of a batch the store reads or writes: input records (append, train_dict), a
//! gather's destination slots, and the first failure of a batch run on the pool.
const std = @import("std");
const assert = std.debug.assert;
const limits = @import("../base/limits.zig");
const errors = @import("../base/errors.zig");
const diagnostic = @import("../base/diagnostic.zig");
const Error = errors.Error;
const Padded = @import("padded.zig").Padded;

/// A batch of input records: record i is data[offsets[i] .. offsets[i+1]) or, without offsets,
/// data[i*stride .. (i+1)*stride).
pub const Records = struct {
    data: [*]const u8,
    offsets: ?[*]const u64 = null,
    stride: u64 = 0,
    count: u64,

    pub fn fromSlices(data: []const u8, offsets: []const u64) Records {
        assert(offsets.len >= 1);
        return .{ .data = data.ptr, .offsets = offsets.ptr, .count = offsets.len - 1 };
    }

    pub fn begin(records: Records, i: u64) u64 {
        return if (records.offsets) |o| o[i] - o[0] else i * records.stride;
    }

    pub fn get(records: Records, i: u64) []const u8 {
        if (records.offsets) |o| return records.data[o[i]..o[i + 1]];
        return records.data[i * records.stride ..][0..records.stride];
    }

    pub fn totalSize(records: Records) u64 {
        if (records.offsets) |o| return o[records.count] - o[0];
        return records.count * records.stride;
    }

    /// Offsets must not decrease and no record may exceed record_size_max.
    pub fn validate(records: Records) Error!void {
        if (records.offsets) |o| {
            for (0..records.count) |i| {
                if (o[i + 1] < o[i]) {
                    diagnostic.note("offsets decrease at record {d} ({d} then {d})", .{ i, o[i], o[i + 1] });
                    return error.InvalidArgument;
                }
                if (o[i + 1] - o[i] > limits.record_size_max) {
                    diagnostic.note("record {d} is {d} bytes; the limit is {d}", .{ i, o[i + 1] - o[i], limits.record_size_max });
                    return error.RecordTooLarge;
                }
            }
        } else if (records.stride > limits.record_size_max and records.count > 0) {
            diagnostic.note("records of {d} bytes; the limit is {d}", .{ records.stride, limits.record_size_max });
            return error.RecordTooLarge;
        }
    }
};

/// A gather destination: slot i is base[offsets[i] .. offsets[i+1]), or, padded, the first
/// rows of record i's block (padded.zig), or else base[i*stride .. (i+1)*stride).
pub const Destination = struct {
    base: [*]u8,
    offsets: ?[*]const u64 = null,
    stride: u64 = 0,
    /// A padded batch: slot i may be shorter than record i (its first rows), and each range
    /// of records copied is finished with its padding and mask.
    padded: ?*const Padded = null,

    pub fn slot(destination: Destination, i: u64) []u8 {
        if (destination.offsets) |o| return destination.base[o[i]..o[i + 1]];
        if (destination.padded) |p| return destination.base[p.slotStart(i)..][0..p.slotLength(i)];
        return destination.base[i * destination.stride ..][0..destination.stride];
    }

    pub fn slotLength(destination: Destination, i: u64) u64 {
        if (destination.offsets) |o| return o[i + 1] - o[i];
        if (destination.padded) |p| return p.slotLength(i);
        return destination.stride;
    }
};

/// Slots back to back at running offsets (slot i is [offsets[i], offsets[i + 1])), as the
/// ragged raw copy takes them (Padded is the other kind).
pub const Offsets = struct {
    offsets: [*]const u64,

    pub inline fn slotStart(slots: Offsets, i: usize) u64 {
        return slots.offsets[i];
    }

    pub inline fn slotLength(slots: Offsets, i: usize) u64 {
        return slots.offsets[i + 1] - slots.offsets[i];
    }

    /// Each slot starts where the one before ends (raw_copy streams them as one run).
    pub inline fn backToBack(_: Offsets) bool {
        return true;
    }
};

/// The first failure of a sharded operation, with its message carried back to the calling
/// thread (messages are thread-local; shards run on pool threads).
pub const Failure = struct {
    claimed: std.atomic.Value(bool) = .init(false),
    err: Error = error.Io,
    message: [256]u8 = undefined,
    message_len: usize = 0,
    /// The thread whose record() won, so that only it names the batch position that failed.
    /// Atomic: a losing thread reads it while the winner may still be writing it (it then
    /// reads 0, which no thread's id is, or the winner's id: either way not its own).
    claimer: std.atomic.Value(std.Thread.Id) = .init(0),
    /// The batch position of the failed record, when the caller placed it (a view does: its
    /// stores' messages name a shard's local index, which the view turns into the global one).
    position: ?usize = null,

    pub fn failed(failure: *const Failure) bool {
        return failure.claimed.load(.monotonic);
    }

    pub fn record(failure: *Failure, err: Error, comptime fmt: []const u8, args: anytype) void {
        if (failure.claimed.swap(true, .acq_rel)) return;
        failure.err = err;
        failure.claimer.store(std.Thread.getCurrentId(), .monotonic);
        const written = std.fmt.bufPrint(&failure.message, fmt, args) catch failure.message[0..];
        failure.message_len = written.len;
    }

    /// Called by the thread whose record at batch position `i` just failed: names `i` when that
    /// failure is the one recorded (another thread's may have come first).
    pub fn place(failure: *Failure, i: usize) void {
        if (failure.claimer.load(.monotonic) == std.Thread.getCurrentId() and failure.position == null) failure.position = i;
    }

    /// Records an error whose message this thread has just set.
    pub fn recordCurrent(failure: *Failure, err: Error) void {
        failure.record(err, "{s}", .{diagnostic.text()});
    }

    pub fn check(failure: *const Failure) Error!void {
        if (!failure.claimed.load(.acquire)) return;
        diagnostic.note("{s}", .{failure.message[0..failure.message_len]});
        return failure.err;
    }
};
