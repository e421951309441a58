from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.create_schedule import CreateSchedule
from ...models.error_body import ErrorBody
from ...models.schedule_view import ScheduleView
from typing import cast



def _get_kwargs(
    *,
    body: CreateSchedule,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}


    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/schedules",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> ErrorBody | ScheduleView | None:
    if response.status_code == 200:
        response_200 = ScheduleView.from_dict(response.json())



        return response_200

    if response.status_code == 201:
        response_201 = ScheduleView.from_dict(response.json())



        return response_201

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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[ErrorBody | ScheduleView]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    body: CreateSchedule,

) -> Response[ErrorBody | ScheduleView]:
    """ `POST /v1/schedules` — 201 with the schedule and its first pending
    occurrence(s). With a key already used on the topic: 200 with the
    existing schedule when the request is the same, 409 `key_conflict`
    otherwise.

    Args:
        body (CreateSchedule): Body of `POST /v1/schedules`: a job's fields (but its time) and
            when it
            repeats.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | ScheduleView]
     """


    kwargs = _get_kwargs(
        body=body,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient | Client,
    body: CreateSchedule,

) -> ErrorBody | ScheduleView | None:
    """ `POST /v1/schedules` — 201 with the schedule and its first pending
    occurrence(s). With a key already used on the topic: 200 with the
    existing schedule when the request is the same, 409 `key_conflict`
    otherwise.

    Args:
        body (CreateSchedule): Body of `POST /v1/schedules`: a job's fields (but its time) and
            when it
            repeats.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | ScheduleView
     """


    return sync_detailed(
        client=client,
body=body,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    body: CreateSchedule,

) -> Response[ErrorBody | ScheduleView]:
    """ `POST /v1/schedules` — 201 with the schedule and its first pending
    occurrence(s). With a key already used on the topic: 200 with the
    existing schedule when the request is the same, 409 `key_conflict`
    otherwise.

    Args:
        body (CreateSchedule): Body of `POST /v1/schedules`: a job's fields (but its time) and
            when it
            repeats.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | ScheduleView]
     """


    kwargs = _get_kwargs(
        body=body,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    body: CreateSchedule,

) -> ErrorBody | ScheduleView | None:
    """ `POST /v1/schedules` — 201 with the schedule and its first pending
    occurrence(s). With a key already used on the topic: 200 with the
    existing schedule when the request is the same, 409 `key_conflict`
    otherwise.

    Args:
        body (CreateSchedule): Body of `POST /v1/schedules`: a job's fields (but its time) and
            when it
            repeats.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | ScheduleView
     """


    return (await asyncio_detailed(
        client=client,
body=body,

    )).parsed
