import { normalizeContent, type ContentNode, type NodeStyles } from '../render/index.js';

/**
 * Ready-made templates (spec §2.3, `GET /v1/templates/gallery`). Each one can be POSTed as-is to create a
 * template and renders with its own sampleProps. They only use the content nodes of spec §2.2 and
 * theme-aware styling (presets, dark overrides), so they follow the project's design: highlight colour,
 * font, logo and dark mode.
 */
export interface GalleryTemplate {
  name: string;
  slug: string;
  tags: string[];
  subject: string;
  preheader: string;
  version: 2;
  sampleProps: Record<string, unknown>;
  content: ContentNode[];
}

// Shared looks. Panels are a light grey surface that turns into a raised dark surface in dark mode.
const panel: NodeStyles = {
  backgroundColor: '#f9fafb',
  borderWidth: 1,
  borderColor: '#eef0f3',
  borderRadius: 10,
  paddingTop: 16,
  paddingBottom: 16,
  paddingLeft: 18,
  paddingRight: 18,
  dark: { backgroundColor: '#23272e', borderColor: '#2f343c' },
};
const eyebrow: NodeStyles = { fontSize: 12, fontWeight: 600, letterSpacing: '0.08em', textTransform: 'uppercase', marginBottom: 8 };
const statLabel: NodeStyles = { marginBottom: 4 };
const statValue: NodeStyles = { fontSize: 22, fontWeight: 700, lineHeight: 1.25, marginBottom: 0 };

/**
 * A label over a big number; in its own panel unless `bare` (several stats sharing one panel). The number
 * is body text made big, not a subtitle: a subtitle is a heading, and "$1,234" is no section's title.
 */
function stat(label: string, value: string, note?: string, bare = false): ContentNode[] {
  const nodes: ContentNode[] = [
    { type: 'text', preset: 'small', text: label, styles: { ...statLabel, textTransform: 'uppercase', letterSpacing: '0.06em', fontWeight: 600 } },
    { type: 'text', text: value, styles: bare ? { ...statValue, fontSize: 17, lineHeight: 1.35 } : statValue },
  ];
  if (note) nodes.push({ type: 'text', preset: 'small', text: note, styles: { marginBottom: 0, paddingTop: 4 } });
  return bare ? nodes : [{ type: 'box', styles: panel, columns: [{ elements: nodes }] }];
}

/** A step of a progress bar; done says so in words too (✓), not only by the bar's colour and bold text. */
function step(label: string, done: boolean): ContentNode[] {
  return [
    { type: 'divider', styles: { borderWidth: 4, borderRadius: 2, paddingTop: 0, marginBottom: 8, ...(done ? { borderColor: '#16a34a' } : {}) } },
    { type: 'text', preset: done ? 'default' : 'muted', text: done ? `**✓ ${label}**` : label, styles: { fontSize: 13, lineHeight: 1.35 } },
  ];
}

const raw: Omit<GalleryTemplate, 'version'>[] = [
  {
    name: 'Welcome',
    slug: 'welcome',
    tags: ['onboarding', 'transactional'],
    subject: 'Welcome to {productName}, {firstName}!',
    preheader: 'Your workspace is ready. Here is how to get the most out of your first week.',
    sampleProps: {
      firstName: 'Ava',
      productName: 'Acme Analytics',
      workspaceName: 'Northwind',
      dashboardUrl: 'https://app.example.com/northwind',
      docsUrl: 'https://docs.example.com',
      supportEmail: 'support@example.com',
    },
    content: [
      { type: 'text', preset: 'title', text: 'Welcome aboard, {firstName} 👋' },
      {
        type: 'text',
        text: 'Thanks for signing up for {productName}. Your workspace **{workspaceName}** is ready. Most teams do these three things in their first ten minutes:',
      },
      {
        type: 'list',
        symbol: 'number',
        items: [
          '**Invite your teammates** so everyone sees the same numbers.',
          '**Connect a data source**: it takes about two minutes.',
          '**Pick a weekly report** and we will send it every Monday.',
        ],
      },
      { type: 'button', label: 'Open your dashboard', url: '{dashboardUrl}', styles: { marginBottom: 28 } },
      { type: 'divider' },
      {
        type: 'box',
        styles: { gap: 24, mobile: { stackColumns: true } },
        columns: [
          { elements: [{ type: 'text', preset: 'muted', text: '**Read the guides**  \nStep-by-step setup in the [documentation]({docsUrl}).' }] },
          { elements: [{ type: 'text', preset: 'muted', text: '**Talk to a human**  \nReply to this email or write to [{supportEmail}](mailto:{supportEmail}).' }] },
        ],
      },
    ],
  },
  {
    name: 'Email verification',
    slug: 'email-verification',
    tags: ['authentication', 'transactional'],
    subject: 'Confirm your email address',
    preheader: 'One click to confirm {email} and finish setting up your account.',
    sampleProps: {
      firstName: 'Ava',
      email: 'ava@example.com',
      productName: 'Acme Analytics',
      verificationUrl: 'https://app.example.com/verify?token=4f8a1c2e9b7d4e6fa3b5c8d1e2f40719',
    },
    content: [
      { type: 'text', preset: 'title', text: 'Confirm your email address' },
      { type: 'text', text: 'Hi {firstName}, please confirm that **{email}** is your email address. This keeps your {productName} account secure and makes sure you receive important notices.' },
      { type: 'button', label: 'Confirm email address', url: '{verificationUrl}', styles: { marginBottom: 28 } },
      { type: 'text', preset: 'muted', text: 'The link expires in 24 hours. If the button does not work, paste this address into your browser:' },
      { type: 'text', preset: 'small', text: '[{verificationUrl}]({verificationUrl})', styles: { ...panel, paddingTop: 12, paddingBottom: 12 } },
      { type: 'text', preset: 'muted', text: 'Did not create an account? You can safely ignore this email.' },
    ],
  },
  {
    name: 'Password reset',
    slug: 'password-reset',
    tags: ['authentication', 'security', 'transactional'],
    subject: 'Reset your {productName} password',
    preheader: 'Use the link inside to choose a new password. It expires in {expiresIn}.',
    sampleProps: {
      productName: 'Acme Analytics',
      email: 'ava@example.com',
      resetUrl: 'https://app.example.com/reset?token=b41c8e0f2a9d47c6',
      expiresIn: '60 minutes',
      requestLocation: 'Lisbon, Portugal',
      requestDevice: 'Firefox on macOS',
    },
    content: [
      { type: 'text', preset: 'title', text: 'Reset your password' },
      { type: 'text', text: 'We received a request to reset the password for the {productName} account **{email}**. Choose a new password with the button below.' },
      { type: 'button', label: 'Choose a new password', url: '{resetUrl}', styles: { marginBottom: 28 } },
      { type: 'text', preset: 'muted', text: 'This link expires in {expiresIn} and can be used once. If you did not ask for a reset, no action is needed: your password stays the same.' },
      {
        type: 'box',
        styles: panel,
        columns: [
          {
            elements: [
              { type: 'text', preset: 'small', text: 'REQUEST DETAILS', styles: { ...eyebrow, marginBottom: 4 } },
              { type: 'text', preset: 'muted', text: '{requestDevice} · {requestLocation}', styles: { marginBottom: 0 } },
            ],
          },
        ],
      },
    ],
  },
  {
    name: 'Login code',
    slug: 'login-code',
    tags: ['authentication', 'security', 'transactional'],
    subject: '{code} is your {productName} sign-in code',
    preheader: 'Enter this code to finish signing in. It expires in 10 minutes.',
    sampleProps: { code: '482 913', productName: 'Acme Analytics', secureUrl: 'https://app.example.com/security' },
    content: [
      { type: 'text', preset: 'title', text: 'Your sign-in code', styles: { align: 'center' } },
      { type: 'text', text: 'Enter this code in the {productName} window to finish signing in.', styles: { align: 'center', marginBottom: 24 } },
      {
        type: 'text',
        text: '{code}',
        styles: {
          align: 'center',
          fontFamily: 'Courier New',
          fontSize: 36,
          fontWeight: 700,
          letterSpacing: '6px',
          color: '#111827',
          backgroundColor: '#f3f4f6',
          borderRadius: 12,
          paddingTop: 20,
          paddingBottom: 20,
          marginBottom: 24,
          dark: { color: '#f9fafb', backgroundColor: '#262a31' },
          mobile: { fontSize: 30, letterSpacing: '4px' },
        },
      },
      {
        type: 'text',
        preset: 'muted',
        text: 'The code expires in 10 minutes. If you did not try to sign in, someone may know your password: [secure your account]({secureUrl}).',
        styles: { align: 'center' },
      },
    ],
  },
  {
    name: 'Receipt',
    slug: 'receipt',
    tags: ['billing', 'transactional'],
    subject: 'Your receipt from {companyName} #{receiptNumber}',
    preheader: '{total} paid on {paidAt}. Thank you for your business.',
    sampleProps: {
      companyName: 'Acme Analytics',
      receiptNumber: '2041-7730',
      paidAt: 'March 3, 2026',
      paymentMethod: 'Visa •••• 4242',
      subtotal: '$147.00',
      tax: '$14.70',
      total: '$161.70',
      invoiceUrl: 'https://app.example.com/billing/invoices/2041-7730',
      supportEmail: 'billing@example.com',
      items: [
        { description: '**Team plan**, monthly', quantity: '1', amount: '$99.00' },
        { description: 'Extra seats', quantity: '3', amount: '$36.00' },
        { description: 'Data retention add-on', quantity: '1', amount: '$12.00' },
      ],
    },
    content: [
      { type: 'text', preset: 'small', text: 'RECEIPT #{receiptNumber}', styles: eyebrow },
      { type: 'text', preset: 'title', text: 'Thanks for your payment' },
      { type: 'text', text: 'We received your payment to {companyName}. Here is a summary for your records.', styles: { marginBottom: 24 } },
      {
        type: 'box',
        styles: { ...panel, gap: 16, marginBottom: 28, mobile: { stackColumns: true } },
        columns: [
          { elements: stat('Amount paid', '{total}', undefined, true) },
          { elements: stat('Date paid', '{paidAt}', undefined, true) },
          { elements: stat('Payment method', '{paymentMethod}', undefined, true) },
        ],
      },
      {
        type: 'table',
        iterationKey: 'items',
        iterationTarget: 'children',
        columns: [{ label: 'Description' }, { label: 'Qty', align: 'center' }, { label: 'Amount', align: 'right' }],
        rows: [
          [{ text: '{description}' }, { text: '{quantity}' }, { text: '{amount}' }],
          [{ text: 'Subtotal' }, { text: '' }, { text: '{subtotal}' }],
          [{ text: 'Tax' }, { text: '' }, { text: '{tax}' }],
          [{ text: '**Total**' }, { text: '' }, { text: '**{total}**' }],
        ],
        styles: { marginBottom: 28 },
      },
      { type: 'button', label: 'Download invoice (PDF)', url: '{invoiceUrl}', preset: 'muted' },
      { type: 'text', preset: 'muted', text: 'Questions about this receipt? Reply to this email or write to [{supportEmail}](mailto:{supportEmail}).' },
    ],
  },
  {
    name: 'Weekly report',
    slug: 'weekly-report',
    tags: ['reports', 'analytics', 'notifications'],
    subject: 'Your week at {productName}: {visitors} visitors',
    preheader: 'Visitors {visitorsChange}, {signups} new sign-ups and your top pages for {period}.',
    sampleProps: {
      productName: 'Acme Analytics',
      period: 'Feb 23 – Mar 1',
      visitors: '12,480',
      visitorsChange: '+18%',
      signups: '342',
      signupsChange: '+6%',
      revenue: '$8,930',
      revenueChange: '−3%',
      startLabel: 'Mon, Feb 23',
      endLabel: 'Sun, Mar 1',
      dailyVisitors: [1320, 1580, 1710, 1650, 2140, 2380, 1700],
      dailySignups: [38, 44, 61, 47, 59, 52, 41],
      reportUrl: 'https://app.example.com/reports/weekly',
      pages: [
        { path: '/pricing', views: '3,204' },
        { path: '/blog/launch-week', views: '2,871' },
        { path: '/docs/getting-started', views: '1,956' },
      ],
    },
    content: [
      { type: 'text', preset: 'small', text: 'WEEKLY REPORT · {period}', styles: eyebrow },
      { type: 'text', preset: 'title', text: 'Your week at {productName}' },
      { type: 'text', text: 'Traffic grew again this week. Here are the numbers that moved.', styles: { marginBottom: 24 } },
      {
        type: 'box',
        styles: { gap: 12, marginBottom: 32, mobile: { stackColumns: true } },
        columns: [
          { elements: stat('Visitors', '{visitors}', '{visitorsChange} vs last week') },
          { elements: stat('Sign-ups', '{signups}', '{signupsChange} vs last week') },
          { elements: stat('Revenue', '{revenue}', '{revenueChange} vs last week') },
        ],
      },
      { type: 'text', preset: 'subtitle', text: 'Daily visitors', styles: { marginBottom: 12 } },
      { type: 'chart', dataKey: 'dailyVisitors', chartType: 'line', curve: 'monotone', fill: true, xAxisStartLabel: '{startLabel}', xAxisEndLabel: '{endLabel}', styles: { marginBottom: 32 } },
      { type: 'text', preset: 'subtitle', text: 'Sign-ups per day', styles: { marginBottom: 12 } },
      { type: 'chart', dataKey: 'dailySignups', chartType: 'bar', fill: true, xAxisStartLabel: '{startLabel}', xAxisEndLabel: '{endLabel}', styles: { marginBottom: 32, height: 140 } },
      { type: 'text', preset: 'subtitle', text: 'Top pages', styles: { marginBottom: 8 } },
      {
        type: 'table',
        iterationKey: 'pages',
        iterationTarget: 'children',
        columns: [{ label: 'Page' }, { label: 'Views', align: 'right' }],
        rows: [[{ text: '`{path}`' }, { text: '{views}' }]],
        styles: { marginBottom: 28 },
      },
      { type: 'button', label: 'View the full report', url: '{reportUrl}' },
    ],
  },
  {
    name: 'Team invitation',
    slug: 'invitation',
    tags: ['collaboration', 'onboarding', 'transactional'],
    subject: '{inviterName} invited you to join {teamName} on {productName}',
    preheader: 'Accept the invitation to start working with {teamName}.',
    sampleProps: {
      inviterName: 'Jonas Weber',
      inviterEmail: 'jonas@northwind.example',
      teamName: 'Northwind Design',
      productName: 'Acme Analytics',
      role: 'Editor',
      inviteUrl: 'https://app.example.com/invite/7ad1c0',
      expiresAt: 'March 10, 2026',
    },
    content: [
      { type: 'text', preset: 'title', text: 'Join {teamName} on {productName}' },
      { type: 'text', text: '**{inviterName}** ({inviterEmail}) invited you to collaborate in the **{teamName}** workspace as an **{role}**.' },
      {
        type: 'box',
        styles: { ...panel, marginBottom: 24 },
        columns: [
          {
            elements: [
              { type: 'text', preset: 'small', text: 'WITH {teamName} YOU CAN', styles: eyebrow },
              { type: 'list', preset: 'muted', symbol: '✓', items: ['See dashboards and reports shared with the team', 'Comment and get notified about changes', 'Create your own views'] },
            ],
          },
        ],
      },
      { type: 'button', label: 'Accept invitation', url: '{inviteUrl}', styles: { marginBottom: 28 } },
      { type: 'text', preset: 'muted', text: 'This invitation expires on {expiresAt}. Not expecting it? You can ignore this email; nothing happens until you accept.' },
    ],
  },
  {
    name: 'Shipping update',
    slug: 'shipping-update',
    tags: ['e-commerce', 'orders', 'transactional'],
    subject: 'Your order #{orderNumber} is on the way',
    preheader: 'Arriving {estimatedDelivery} with {carrier}. Track your package any time.',
    sampleProps: {
      firstName: 'Ava',
      orderNumber: '100482',
      carrier: 'DHL Express',
      trackingNumber: 'JD014600006281093542',
      estimatedDelivery: 'Thursday, March 5',
      trackingUrl: 'https://track.example.com/JD014600006281093542',
      shippingAddress: 'Ava Moreno\n18 Harbour Street\nBristol BS1 4RN\nUnited Kingdom',
      items: [
        { name: 'Linen overshirt, sand', quantity: '1' },
        { name: 'Merino socks (3-pack)', quantity: '2' },
      ],
    },
    content: [
      { type: 'text', preset: 'small', text: 'ORDER #{orderNumber}', styles: eyebrow },
      { type: 'text', preset: 'title', text: 'Your order is on the way 📦' },
      { type: 'text', text: 'Good news, {firstName}! Your package left our warehouse and is travelling with **{carrier}**. Estimated delivery: **{estimatedDelivery}**.', styles: { marginBottom: 24 } },
      {
        type: 'box',
        styles: { gap: 8, marginBottom: 28 },
        columns: [
          { elements: step('Ordered', true) },
          { elements: step('Shipped', true) },
          { elements: step('Out for delivery', false) },
          { elements: step('Delivered', false) },
        ],
      },
      { type: 'button', label: 'Track your package', url: '{trackingUrl}', styles: { marginBottom: 12 } },
      { type: 'text', preset: 'small', text: 'Tracking number: `{trackingNumber}`', styles: { marginBottom: 28 } },
      {
        type: 'table',
        iterationKey: 'items',
        iterationTarget: 'children',
        columns: [{ label: 'In this package' }, { label: 'Qty', align: 'right' }],
        rows: [[{ text: '{name}' }, { text: '{quantity}' }]],
        styles: { marginBottom: 24 },
      },
      {
        type: 'box',
        styles: panel,
        columns: [
          {
            elements: [
              { type: 'text', preset: 'small', text: 'SHIPPING TO', styles: { ...eyebrow, marginBottom: 4 } },
              { type: 'text', preset: 'muted', text: '{shippingAddress}', styles: { marginBottom: 0 } },
            ],
          },
        ],
      },
    ],
  },
  {
    name: 'Trial ending',
    slug: 'trial-ending',
    tags: ['billing', 'lifecycle'],
    subject: 'Your {productName} trial ends in {daysLeft} days',
    preheader: 'Pick a plan to keep your dashboards, reports and data.',
    sampleProps: { productName: 'Acme Analytics', daysLeft: '3', trialEndsAt: 'March 6, 2026', plansUrl: 'https://app.example.com/billing/plans', firstName: 'Ava' },
    content: [
      { type: 'text', preset: 'title', text: 'Your trial ends in {daysLeft} days' },
      { type: 'text', text: 'Hi {firstName}, your free trial of {productName} ends on **{trialEndsAt}**. Choose a plan to keep everything you have set up:' },
      { type: 'list', symbol: '✓', items: ['All dashboards, reports and alerts', 'Your full event history', 'Everyone you invited to the workspace'] },
      { type: 'button', label: 'Choose a plan', url: '{plansUrl}', styles: { marginBottom: 28 } },
      { type: 'text', preset: 'muted', text: 'No decision yet? Your data stays available for 30 days after the trial, so you can come back whenever you are ready.' },
    ],
  },
  {
    name: 'API key created',
    slug: 'api-key-created',
    tags: ['developers', 'security', 'transactional'],
    subject: 'A new API key was created for {projectName}',
    preheader: 'Key {keyPrefix}… was created by {createdBy}. Here is how to use it.',
    sampleProps: {
      projectName: 'Northwind production',
      keyPrefix: 'pk_live_7Hc2',
      createdBy: 'jonas@northwind.example',
      createdAt: 'March 3, 2026 at 14:05 UTC',
      keysUrl: 'https://app.example.com/settings/api-keys',
    },
    content: [
      { type: 'text', preset: 'title', text: 'New API key created' },
      { type: 'text', text: 'A key starting with `{keyPrefix}` was created for **{projectName}** by {createdBy} on {createdAt}. Send your first request with it:' },
      {
        type: 'code',
        language: 'bash',
        code: 'curl https://api.example.com/v1/email/send \\\n  -H "Authorization: Bearer $API_KEY" \\\n  -H "Content-Type: application/json" \\\n  -d \'{"toAddress": "ava@example.com", "templateName": "Welcome"}\'',
      },
      { type: 'button', label: 'Manage API keys', url: '{keysUrl}', preset: 'outline', styles: { marginBottom: 28 } },
      { type: 'text', preset: 'muted', text: 'Did not create this key? Revoke it right away on the API keys page and rotate any secrets it could reach.' },
    ],
  },
];

export const galleryTemplates: GalleryTemplate[] = raw.map((t) => ({ ...t, version: 2, content: normalizeContent(t.content) }));
