import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { chromium, type Browser } from 'playwright-core';

/** Debian's chromium package; playwright-core drives it directly (no browser download). */
export const chromiumPath = '/usr/bin/chromium';

export const chromiumArgs = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export function chromiumAvailable(): boolean {
  return existsSync(chromiumPath);
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: chromiumPath, args: chromiumArgs, headless: true });
}

export interface Viewport {
  name: string;
  width: number;
  height: number;
  colorScheme: 'light' | 'dark';
}

export const viewports: Viewport[] = [
  { name: 'desktop', width: 800, height: 900, colorScheme: 'light' },
  { name: 'mobile', width: 375, height: 740, colorScheme: 'light' },
  { name: 'dark', width: 800, height: 900, colorScheme: 'dark' },
  { name: 'mobile-dark', width: 375, height: 740, colorScheme: 'dark' },
];

/**
 * The `skip` option of a browser test's suite: false when Debian's chromium is here, else the reason.
 * With CI=true a missing browser is a failing test instead, never a silent skip.
 */
export function skipWithoutChromium(): string | false {
  if (chromiumAvailable()) return false;
  if (process.env.CI === 'true') {
    test('headless Chromium is required in CI', () => assert.fail(`${chromiumPath} is missing; the browser test cannot be skipped in CI`));
  }
  return `${chromiumPath} not found; install Debian's chromium to run the browser test`;
}
