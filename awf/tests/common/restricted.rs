//! Running awf as it would run on a machine that restricts the sandbox's layers, to test
//! each fallback here for real:
//!
//! - [`without_user_namespaces`]: inside `unshare -U -r` whose own
//!   `user.max_user_namespaces` is 0, so no nested user namespace can be made (as where
//!   Docker's default seccomp profile or the sysctl refuses them);
//! - [`without_mounts`]: under a seccomp filter that fails every mount syscall with EPERM, as
//!   the AppArmor restriction of Ubuntu 23.10+ does (the user namespace is made, but holds no
//!   capability, so no mount works in it);
//! - [`without_cgroups`]: in a mount namespace whose `/sys/fs/cgroup` is an empty tmpfs.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// `program args` where no user namespace can be made.
pub fn without_user_namespaces(program: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args(["-U", "-r", "sh", "-c"])
        .arg("echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"")
        .arg(program)
        .args(args);
    cmd
}

/// `program args` where no cgroup hierarchy can be reached.
pub fn without_cgroups(program: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args(["-U", "-r", "-m", "sh", "-c"])
        .arg("mount -t tmpfs none /sys/fs/cgroup && exec \"$0\" \"$@\"")
        .arg(program)
        .args(args);
    cmd
}

/// The mount syscalls, by number, of this machine's architecture: mount, mount_setattr,
/// open_tree, move_mount, fsopen, fsconfig, fsmount.
#[cfg(target_arch = "x86_64")]
const MOUNT_CALLS: &[u32] = &[165, 442, 428, 429, 430, 431, 432];
#[cfg(target_arch = "aarch64")]
const MOUNT_CALLS: &[u32] = &[40, 442, 428, 429, 430, 431, 432];
#[cfg(target_arch = "x86_64")]
const ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const ARCH: u32 = 0xc000_00b7;

/// Makes `cmd` run under a seccomp filter that fails every mount syscall with EPERM.
pub fn without_mounts(cmd: &mut Command) {
    fn stmt(code: u16, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }
    // BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K.
    let (ld, jeq, ret) = (0x20u16, 0x15u16, 0x06u16);
    let allow = 0x7fff_0000u32;
    let eperm = 0x0005_0000u32 | libc::EPERM as u32;
    let mut program = vec![
        stmt(ld, 4),
        libc::sock_filter {
            code: jeq,
            jt: 1,
            jf: 0,
            k: ARCH,
        },
        stmt(ret, allow),
        stmt(ld, 0),
    ];
    for &nr in MOUNT_CALLS {
        program.push(libc::sock_filter {
            code: jeq,
            jt: 0,
            jf: 1,
            k: nr,
        });
        program.push(stmt(ret, eperm));
    }
    program.push(stmt(ret, allow));
    // SAFETY: prctl and seccomp on a program owned by the closure, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: program.len() as u16,
                filter: program.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(libc::SYS_seccomp, 1u32, 0u32, &prog as *const _) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
