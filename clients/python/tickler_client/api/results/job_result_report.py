from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error_body import ErrorBody
from ...models.report_answer import ReportAnswer
from ...models.report_body import ReportBody
from typing import cast



def _get_kwargs(
    id: int,
    *,
    body: ReportBody,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}


    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/jobs/{id}/result".format(id=quote(str(id), safe=""),),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> ErrorBody | ReportAnswer | None:
    if response.status_code == 200:
        response_200 = ReportAnswer.from_dict(response.json())



        return response_200

    if response.status_code == 400:
        response_400 = ErrorBody.from_dict(response.json())



        return response_400

    if response.status_code == 401:
        response_401 = ErrorBody.from_dict(response.json())



        return response_401

    if response.status_code == 403:
        response_403 = ErrorBody.from_dict(response.json())



        return response_403

    if response.status_code == 404:
        response_404 = ErrorBody.from_dict(response.json())



        return response_404

    if response.status_code == 409:
        response_409 = ErrorBody.from_dict(response.json())



        return response_409

    if response.status_code == 413:
        response_413 = ErrorBody.from_dict(response.json())



        return response_413

    if response.status_code == 415:
        response_415 = ErrorBody.from_dict(response.json())



        return response_415

    if response.status_code == 429:
        response_429 = ErrorBody.from_dict(response.json())



        return response_429

    if response.status_code == 503:
        response_503 = ErrorBody.from_dict(response.json())



        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[ErrorBody | ReportAnswer]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    body: ReportBody,

) -> Response[ErrorBody | ReportAnswer]:
    """ 200 `{"applied": true, "job"}` when the report moved the job;
    200 `{"applied": false, "ignored": reason, "message", "job"}` when it
    changed nothing (stale attempt, repeated, not expected...) — the same
    report on the results topic would be skipped and counted; 404 when there
    is no such job; 400 `invalid_report` for a malformed body.

    Args:
        id (int):
        body (ReportBody): The JSON of a report, as it arrives on the results topic or on
            `POST /v1/jobs/{id}/result` (where `job_id` may be left out).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | ReportAnswer]
     """


    kwargs = _get_kwargs(
        id=id,
body=body,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    body: ReportBody,

) -> ErrorBody | ReportAnswer | None:
    """ 200 `{"applied": true, "job"}` when the report moved the job;
    200 `{"applied": false, "ignored": reason, "message", "job"}` when it
    changed nothing (stale attempt, repeated, not expected...) — the same
    report on the results topic would be skipped and counted; 404 when there
    is no such job; 400 `invalid_report` for a malformed body.

    Args:
        id (int):
        body (ReportBody): The JSON of a report, as it arrives on the results topic or on
            `POST /v1/jobs/{id}/result` (where `job_id` may be left out).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | ReportAnswer
     """


    return sync_detailed(
        id=id,
client=client,
body=body,

    ).parsed

async def asyncio_detailed(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    body: ReportBody,

) -> Response[ErrorBody | ReportAnswer]:
    """ 200 `{"applied": true, "job"}` when the report moved the job;
    200 `{"applied": false, "ignored": reason, "message", "job"}` when it
    changed nothing (stale attempt, repeated, not expected...) — the same
    report on the results topic would be skipped and counted; 404 when there
    is no such job; 400 `invalid_report` for a malformed body.

    Args:
        id (int):
        body (ReportBody): The JSON of a report, as it arrives on the results topic or on
            `POST /v1/jobs/{id}/result` (where `job_id` may be left out).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | ReportAnswer]
     """


    kwargs = _get_kwargs(
        id=id,
body=body,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    id: int,
    *,
    client: AuthenticatedClient | Client,
    body: ReportBody,

) -> ErrorBody | ReportAnswer | None:
    """ 200 `{"applied": true, "job"}` when the report moved the job;
    200 `{"applied": false, "ignored": reason, "message", "job"}` when it
    changed nothing (stale attempt, repeated, not expected...) — the same
    report on the results topic would be skipped and counted; 404 when there
    is no such job; 400 `invalid_report` for a malformed body.

    Args:
        id (int):
        body (ReportBody): The JSON of a report, as it arrives on the results topic or on
            `POST /v1/jobs/{id}/result` (where `job_id` may be left out).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | ReportAnswer
     """


    return (await asyncio_detailed(
        id=id,
client=client,
body=body,

    )).parsed
