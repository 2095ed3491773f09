// Prints config.example.toml from the config schema: `npm run config:example`.
import { renderExampleToml } from '../src/config/example.js';

process.stdout.write(renderExampleToml());
