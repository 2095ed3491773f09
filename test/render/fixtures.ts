import { encodePng } from '../../src/render/chart/png.js';
import type { ProjectDesign } from '../../src/render/index.js';

/**
 * Shared inputs for the render tests, the browser test and `scripts/render-gallery.ts`: a branded
 * project design (logo, highlight colour, dark mode, footer) and a markdown email using every feature.
 */

/** A 240×64 logo: a rounded mark and a bar, drawn with the project's own PNG encoder. */
export function sampleLogoBase64(): string {
  const w = 240;
  const h = 64;
  const px = new Uint8Array(w * h * 4);
  const paint = (x: number, y: number, rgb: [number, number, number], a = 255) => {
    const i = (y * w + x) * 4;
    px[i] = rgb[0];
    px[i + 1] = rgb[1];
    px[i + 2] = rgb[2];
    px[i + 3] = a;
  };
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const dx = Math.max(0, Math.abs(x - 32) - 16);
      const dy = Math.max(0, Math.abs(y - 32) - 16);
      if (Math.hypot(dx, dy) <= 12) paint(x, y, [79, 70, 229]);
      else if (x >= 76 && x <= 226 && y >= 22 && y <= 42 && Math.hypot(Math.max(0, Math.abs(x - 151) - 65), Math.max(0, Math.abs(y - 32) - 0)) <= 10) paint(x, y, [107, 114, 128], 200);
    }
  }
  return encodePng(w, h, px).toString('base64');
}

export function sampleDesign(overrides: Partial<ProjectDesign> = {}): ProjectDesign {
  return {
    logo: { sizeWidth: 120, href: 'https://example.com', file: sampleLogoBase64() },
    font: { name: 'System' },
    colors: { highlight: '#4f46e5', isDarkModeEnabled: true },
    footerTextTransactional: 'Acme Analytics · 18 Harbour Street, Bristol BS1 4RN · [acme.example](https://acme.example)',
    unsubscribeText: 'You receive this email because you have an account with Acme Analytics.',
    ...overrides,
  };
}

export const sampleMarkdown = `---
subject: "Deploy {version} finished"
preheader: The release is live in all regions.
---
# Deploy {version} is live 🚀

Hi {firstName}, the release you started finished **without errors**. Here is what changed:

- Faster cold starts for \`edge\` functions
- New [status page](https://status.example.com)
- Fixed a rare crash when uploading *very* large files

[$btn View the deployment]({deployUrl})

Roll back from the CLI if anything looks wrong:

\`\`\`bash
npx acme rollback --to {previousVersion} --region all
\`\`\`

Or call the API directly:

\`\`\`javascript
const res = await fetch("https://api.example.com/v1/deployments", { method: "POST" });
console.log(await res.json()); // { id: "dep_123" }
\`\`\`

| Region | Status |
|---|--:|
| eu-west | ✅ live |
| us-east | ✅ live |

> Questions? Reply to this email and the on-call engineer will answer.
`;

export const sampleMarkdownProps = {
  version: 'v2.14.0',
  firstName: 'Ava',
  deployUrl: 'https://app.example.com/deployments/2140',
  previousVersion: 'v2.13.3',
};
