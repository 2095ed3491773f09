import { lstatSync, mkdirSync, readlinkSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

/**
 * `mkdir -p`, one level at a time. Node 20's `mkdirSync(path, { recursive: true })` mishandles the errors
 * a data directory meets: a folder the kernel refuses with ENOENT under a parent that exists (`/proc/x`)
 * made it retry forever, on the event loop, so the boot hung and ignored SIGTERM; and EROFS (a read-only
 * mount) came out as ENOENT, from the wrong folder. Here each `mkdir` reports its own errno, for the
 * caller to name the setting.
 */
export function makeDirectory(path: string, mode = 0o777): void {
  const target = resolve(path);
  if (isDirectory(target)) return;
  const parent = dirname(target);
  if (parent !== target) makeDirectory(parent, mode);
  try {
    mkdirSync(target, { mode });
  } catch (error) {
    // Made meanwhile by someone else (two starts at once): as good as made here.
    if ((error as NodeJS.ErrnoException).code === 'EEXIST' && isDirectory(target)) return;
    throw danglingLink(target) ?? error;
  }
}

/**
 * Follows symlinks, as mkdir -p does: a link to a directory is a directory. Only a missing entry is "not
 * there yet": Node 22 and 24 answer `throwIfNoEntry: false` with undefined for ENOTDIR too (a path below a
 * file), and the mkdir that followed told the operator EEXIST about a folder that was never there.
 */
function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw error;
  }
}

/**
 * A symbolic link whose target is gone answers mkdir with EEXIST ("file already exists"), which reads as
 * if the folder were there: the error says what is, keeping the errno for the caller to name the setting.
 */
function danglingLink(path: string): NodeJS.ErrnoException | undefined {
  if (!lstatSync(path, { throwIfNoEntry: false })?.isSymbolicLink()) return undefined;
  return Object.assign(new Error(`${path} is a symbolic link to ${readlinkSync(path)}, which does not exist`), { code: 'EEXIST' });
}
