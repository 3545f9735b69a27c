//! Tests of the store engine (store.zig) through its Zig API, in a temporary folder.
const std = @import("std");
const store_mod = @import("store.zig");
const Store = store_mod.Store;

test "placeholder" {}
