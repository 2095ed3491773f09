import { statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ConfigError, invocationDirectory, loadProcessConfig } from './config/load.js';
import { backupDatabase, restoreDatabase } from './db/backup.js';
import { openDatabase, type Sqlite } from './db/client.js';
import { immediateWrites } from './db/immediate-writes.js';
import { lockDataDir, unusableDataDir } from './db/data-dir-lock.js';
import { assertSchemaCurrent } from './db/migrate.js';
import { systemClock } from './lib/clock.js';
import { createLogger } from './lib/logger.js';
import { createProjectsRepo } from './projects/repo.js';
import { createProjectsService, type ProjectsService } from './projects/service.js';

const usage = `Usage: postino <command> [--config PATH] [--section.key=value ...]

Commands:
  keys create [--project ID] [--name NAME]   create an API key (printed once); default project if no --project
  keys list [--project ID]                   list keys (prefix, project, state)
  keys revoke KEY_ID                         revoke a key at once
  projects list                              list projects (one whose deletion was interrupted: deleting)
  projects delete PROJECT_ID                 delete a linked project and everything in it, at once (the
                                             exact id, see projects list; as DELETE /v1/project does)
  backup FILE                                write a consistent copy of the database to FILE, also while
                                             the appliance runs (FILE must not exist yet)
  restore FILE                               put a backup in place of the database, the appliance stopped
                                             (the database replaced is kept as postino.sqlite.replaced,
                                             or .replaced.2, .3... beside earlier ones)
`;

interface CommandInput {
  projects: ProjectsService;
  defaultProjectId: string;
  options: Record<string, string>;
  /** The words after the command: a key id for `keys revoke`, a project id for `projects delete`. */
  positional: string[];
}

/** For a command that works on the database file as it is, whatever its schema (a backup before an upgrade). */
interface DatabaseInput {
  sqlite: Sqlite;
  databasePath: string;
  positional: string[];
}

type Command = {
  /** The options it reads: any other is refused, not ignored (`keys list --name x` lists every key). */
  options: readonly ('project' | 'name')[];
  /** Words after the command it takes: a key id for `keys revoke`. */
  positional: number;
} & (
  | { run: (input: CommandInput) => number | Promise<number> }
  | { runOnDatabase: (input: DatabaseInput) => number }
  /** Works on the data directory whether or not it holds a database yet (a restore on a new machine). */
  | { runOnDataDir: (input: { dataDir: string; databasePath: string; positional: string[] }) => number }
);

/** Each command and what it does; a command line names one of these or is refused before any database is opened. */
const commands: Record<string, Command> = {
  'keys create': {
    options: ['project', 'name'],
    positional: 0,
    run: ({ projects, defaultProjectId, options }) => {
      const created = projects.createKey(options.project ?? defaultProjectId, options.name ?? 'cli');
      return print(`${created.key}\n(key id ${created.id}, project ${created.projectId}; shown only this once)\n`, 0);
    },
  },
  'keys list': {
    options: ['project'],
    positional: 0,
    run: ({ projects, options }) => {
      const rows = projects.listKeys(options.project).map((k) =>
        [k.id, k.projectId, `${k.keyPrefix}…`, k.name, k.revokedAt ? `revoked ${new Date(k.revokedAt).toISOString()}` : 'active'].join('\t'),
      );
      return print(['ID\tPROJECT\tKEY\tNAME\tSTATE', ...rows].join('\n') + '\n', 0);
    },
  },
  'keys revoke': {
    options: [],
    positional: 1,
    run: ({ projects, positional }) => {
      if (!positional[0]) return print('keys revoke needs a key id (see keys list)\n', 2);
      return projects.revokeKey(positional[0]) ? print(`revoked ${positional[0]}\n`, 0) : print(`no active key ${positional[0]}\n`, 1);
    },
  },
  'projects list': {
    options: [],
    positional: 0,
    run: ({ projects }) => {
      // A deletion stopped half way (the appliance stopped during its purge) leaves the project listed
      // until the next start finishes it: said here, or the operator would try to use it or delete it again.
      const state = (id: string) => (projects.isBeingDeleted(id) ? 'deleting' : 'active');
      const rows = projects.listProjects().map((p) => [p.id, p.parentProjectId ?? '-', p.isDefault ? 'default' : '', state(p.id), p.name].join('\t'));
      return print(['ID\tPARENT\tDEFAULT\tSTATE\tNAME', ...rows].join('\n') + '\n', 0);
    },
  },
  'projects delete': {
    options: [],
    positional: 1,
    run: async ({ projects, positional }) => {
      const id = positional[0];
      if (!id) return print('projects delete needs a project id (see projects list)\n', 2);
      const project = projects.findProject(id);
      if (!project) return print(`postino: no project ${id} (see projects list)\n`, 1);
      // The API's deletion, as the parent project's key asks for it: the same rules (linked projects
      // only, none with linked projects of their own), keys revoked at once, rows purged in batches.
      const { deleted } = await projects.deleteLinkedProject(project.parentId ?? project.id, project.id);
      if (!deleted) return print(`postino: project ${id} is being deleted already (an interrupted deletion goes on at the appliance's next start)\n`, 1);
      return print(`deleted project ${id} (${project.name})\n`, 0);
    },
  },
  backup: {
    options: [],
    positional: 1,
    runOnDatabase: ({ sqlite, databasePath, positional }) => {
      if (!positional[0]) return print('backup needs the file to write, e.g. backup /var/backups/postino-$(date +%F).sqlite\n', 2);
      const file = operatorPath(positional[0]);
      const { bytes } = backupDatabase(sqlite, file);
      return print(`backed up ${databasePath} to ${file} (${(bytes / 1_048_576).toFixed(1)} MB)\n`, 0);
    },
  },
  restore: {
    options: [],
    positional: 1,
    runOnDataDir: ({ dataDir, databasePath, positional }) => {
      if (!positional[0]) return print('restore needs the backup file to put in place (made by backup)\n', 2);
      // Refused while an appliance runs on this directory: it has the database open.
      const lock = lockDataDir(dataDir, 'Stop it first: a restore replaces the database it has open.');
      try {
        const file = operatorPath(positional[0]);
        const { replaced, logAside } = restoreDatabase(file, databasePath);
        const kept = replaced
          ? `; the database it replaced is ${replaced} (with its -wal, if any)`
          : logAside
            ? `; a log left there without its database (it does not belong to the one restored) is now ${logAside}`
            : '';
        return print(`restored ${file} to ${databasePath}${kept}\n`, 0);
      } finally {
        lock.release();
      }
    },
  },
};

/** A file the operator named, from where they typed it (a backup went to the package's folder under npm). */
function operatorPath(file: string): string {
  return resolve(invocationDirectory(), file);
}

/** Operator commands that work on the database directly, without the HTTP API (the server may run). */
async function run(args: string[]): Promise<number> {
  // Flags may stand anywhere: `postino --storage.data_dir=d keys list` as well as after the command.
  if (args.includes('--help') || args.includes('-h')) return print(usage, 0);
  const { positional: words, options, configFlags } = splitArgs(args);
  const [group, ...rest] = words;
  if (!group || group === 'help') return print(usage, 0);
  // A command is one word (`backup FILE`) or two (`keys list`).
  const oneWord = Object.hasOwn(commands, group);
  const command = oneWord ? group : `${group} ${rest[0] ?? ''}`.trim();
  const positional = oneWord ? rest : rest.slice(1);
  // Before the database is looked for: a mistyped command is that, not a missing database.
  if (!Object.hasOwn(commands, command)) return print(`postino: unknown command "${command}"\n\n${usage}`, 2);
  const found = commands[command];
  const { options: takes, positional: wordsTaken } = found;
  if (positional.length > wordsTaken) return print(`postino: unexpected argument "${positional.at(-1)}"\n\n${usage}`, 2);
  const unread = Object.keys(options).find((option) => !(takes as readonly string[]).includes(option));
  if (unread) return print(`postino: ${command} does not take --${unread}\n\n${usage}`, 2);
  const config = loadProcessConfig(configFlags);
  const databasePath = join(config.storage.data_dir, 'postino.sqlite');
  if ('runOnDataDir' in found) return found.runOnDataDir({ dataDir: config.storage.data_dir, databasePath, positional });
  // Never create one: a mistyped data directory would give a database of its own that looks fine.
  const missing = databaseMissing(databasePath);
  if (missing) return print(`postino: ${missing}\n`, 1);
  let database: ReturnType<typeof openDatabase> | undefined;
  try {
    database = openDatabase({ path: databasePath, synchronous: config.storage.synchronous, guest: true });
    // Beside a running appliance: never migrate the file it has open (an upgrade is the appliance's to do).
    if (!('runOnDatabase' in found)) assertSchemaCurrent(database.db);
  } catch (error) {
    database?.close();
    throw unusableDataDir(error, databasePath);
  }
  try {
    if ('runOnDatabase' in found) return found.runOnDatabase({ sqlite: database.sqlite, databasePath, positional });
    const log = createLogger({ level: 'silent' });
    const projects = createProjectsService({ repo: createProjectsRepo(database.db, database.sqlite), sqlite: database.sqlite, writes: immediateWrites(database.sqlite), clock: systemClock, log });
    const known = projects.listProjects();
    const defaultProjectId = known.find((project) => project.isDefault)?.id;
    if (!defaultProjectId) return print('postino: the database has no default project yet; start the appliance once first.\n', 1);
    if (options.project && !known.some((project) => project.id === options.project)) return print(`postino: no project ${options.project} (see projects list)\n`, 1);
    return await found.run({ projects, defaultProjectId, options, positional });
  } finally {
    database.close();
  }
}

/** Why there is no database to open at `path`, or undefined when there is a file. */
function databaseMissing(path: string): string | undefined {
  try {
    statSync(path);
    return undefined;
  } catch (error) {
    const code = (error as { code?: string }).code;
    // The appliance makes its data directory 0700: another user cannot even see that the file exists.
    if (code === 'EACCES' || code === 'EPERM') return `cannot read ${path} (${code}): run this as the user the appliance runs as.`;
    return `no database at ${path}. Start the appliance once (npm start), or point storage.data_dir (POSTINO_STORAGE_DATA_DIR or --storage.data_dir) at its data directory.`;
  }
}

function splitArgs(args: string[]) {
  const positional: string[] = [];
  const options: Record<string, string> = {};
  const configFlags: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    const name = arg.startsWith('--') ? arg.slice(2).split('=')[0] : undefined;
    const inlineValue = arg.includes('=') ? arg.slice(arg.indexOf('=') + 1) : undefined;
    if (name === 'project' || name === 'name') {
      const value = inlineValue ?? args[++i];
      // `keys create --project --name x` must not create a key for the default project instead.
      if (value === undefined || value === '' || (inlineValue === undefined && value.startsWith('--'))) throw new UsageError(`--${name} needs a value`);
      options[name] = value;
    } else if (name && name !== 'config' && !name.includes('.')) {
      // Configuration flags name a key, `--section.key`: anything else is a mistyped option.
      throw new UsageError(`unknown option --${name}`);
    } else if (name) {
      configFlags.push(arg);
      if (inlineValue === undefined && args[i + 1] !== undefined) configFlags.push(args[++i]);
    } else positional.push(arg);
  }
  return { positional, options, configFlags };
}

/** A command line that cannot be read: said with the usage, exit code 2. */
class UsageError extends Error {}

function print(text: string, code: number): number {
  (code === 0 ? process.stdout : process.stderr).write(text);
  return code;
}

run(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    const message = error instanceof ConfigError ? `configuration error: ${error.message}` : (error as Error).message;
    process.stderr.write(error instanceof UsageError ? `postino: ${message}\n\n${usage}` : `postino: ${message}\n`);
    process.exitCode = error instanceof UsageError ? 2 : 1;
  },
);
